// AnswerUnary: a unary call of a raw-bytes service that is answered at once, on the gRPC
// thread (parse, handle, serialize, finish), with one error path for every failure.
#pragma once

#include <grpcpp/server_context.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/server_callback.h>

#include <exception>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "server/grpc_api/call_context.h"
#include "server/grpc_api/status_mapping.h"
#include "server/grpc_api/wire_codec.h"

namespace kvserve::server::grpc_api {

// Parses `raw_request` as a `Request` (INVALID_ARGUMENT when it is not one), runs
// `handle(const Request&, Response*) -> absl::Status`, serializes the response into
// `raw_response` on success and finishes the call. An exception escaping `handle` becomes
// INTERNAL naming the request id (see InternalErrorFor). Returns the reactor to hand to gRPC.
template <typename Request, typename Response, typename Handle>
grpc::ServerUnaryReactor* AnswerUnary(grpc::CallbackServerContext* context,
                                      const ReplicaIdentity& replica, std::string_view method,
                                      const grpc::ByteBuffer* raw_request,
                                      grpc::ByteBuffer* raw_response, Handle&& handle) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const std::string request_id = BeginCall(context, replica, method);
  if (absl::Status denied = CallerDenied(context); !denied.ok()) {
    reactor->Finish(ToGrpcStatus(denied));
    return reactor;
  }
  grpc::Status status;
  try {
    Request request;
    Response response;
    absl::Status s = ParseCallRequest(*context, *raw_request, &request);
    if (s.ok()) s = std::forward<Handle>(handle)(request, &response);
    if (s.ok()) s = SerializeWireMessage(response, raw_response);
    status = ToGrpcStatus(s);
  } catch (const std::exception& e) {
    status = ToGrpcStatus(InternalErrorFor(request_id, method, &e));
  } catch (...) {
    status = ToGrpcStatus(InternalErrorFor(request_id, method, nullptr));
  }
  reactor->Finish(status);
  return reactor;
}

}  // namespace kvserve::server::grpc_api
