// SessionService: the kvserve.v1.Sessions gRPC service (callback API). Every call runs on the
// engine thread, which owns the sessions' caches, and finishes there.
#pragma once

#include "kvserve/v1/session.grpc.pb.h"
#include "server/grpc_api/attached.h"
#include "server/grpc_api/call_context.h"

namespace kvserve::cache {
struct SessionInfo;
}  // namespace kvserve::cache

namespace kvserve::server {
class Engine;
class RequestBuilder;
}  // namespace kvserve::server

namespace kvserve::server::grpc_api {

// What the service serves once the model is loaded; every pointer must outlive the service.
struct ServedSessions {
  Engine* engine = nullptr;
  const RequestBuilder* builder = nullptr;
};

// Every method takes the request's raw bytes (see wire_codec.h).
using RawSessionsService = v1::Sessions::WithRawCallbackMethod_CreateSession<
    v1::Sessions::WithRawCallbackMethod_GetSession<v1::Sessions::WithRawCallbackMethod_ListSessions<
        v1::Sessions::WithRawCallbackMethod_CloseSession<
            v1::Sessions::WithRawCallbackMethod_RollbackSession<v1::Sessions::Service>>>>>;

// Until Attach every call is UNAVAILABLE; once the engine shuts down too. Handlers never
// block. Every response carries the trailing metadata of BeginCall.
class SessionService final : public RawSessionsService {
 public:
  // `replica` must outlive the service.
  explicit SessionService(const ReplicaIdentity* replica) : replica_(replica) {}
  // Starts serving. Call once; thread-safe.
  void Attach(ServedSessions served) { served_.Attach(served); }

  grpc::ServerUnaryReactor* CreateSession(grpc::CallbackServerContext* context,
                                          const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetSession(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ListSessions(grpc::CallbackServerContext* context,
                                         const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* CloseSession(grpc::CallbackServerContext* context,
                                         const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* RollbackSession(grpc::CallbackServerContext* context,
                                            const grpc::ByteBuffer* request,
                                            grpc::ByteBuffer* response) override;

 private:
  const ReplicaIdentity* const replica_;
  Attached<ServedSessions> served_;
};

// The wire form of a session.
v1::Session ToProto(const cache::SessionInfo& info);

}  // namespace kvserve::server::grpc_api
