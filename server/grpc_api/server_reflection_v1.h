// ServerReflectionV1: grpc.reflection.v1.ServerReflection answered from a descriptor pool, for
// gRPC releases whose reflection plugin serves only v1alpha (Debian's 1.51).
#pragma once

#include <string>
#include <vector>

#include "grpc_reflection/v1/reflection.grpc.pb.h"

namespace google::protobuf {
class DescriptorPool;
}  // namespace google::protobuf

namespace kvserve::server::grpc_api {

// The v1 reflection service (callback API). Each request of a stream gets one response, in
// order: the file (serialized FileDescriptorProto) of a name or a symbol followed by every file
// it imports transitively, each once per response; the extensions of a message type; the
// services listed at construction; or an error_response (NOT_FOUND for a name the pool does
// not hold, UNIMPLEMENTED for a request of no kind known here). Thread-safe.
class ServerReflectionV1 final : public grpc::reflection::v1::ServerReflection::CallbackService {
 public:
  // `services`: the full names ListServices answers (every service the server registers, so
  // that it answers what v1alpha does). `pool` (not owned; null: the generated pool, which
  // holds every compiled-in .proto) must outlive the service.
  explicit ServerReflectionV1(std::vector<std::string> services,
                              const google::protobuf::DescriptorPool* pool = nullptr);

  grpc::ServerBidiReactor<grpc::reflection::v1::ServerReflectionRequest,
                          grpc::reflection::v1::ServerReflectionResponse>*
  ServerReflectionInfo(grpc::CallbackServerContext* context) override;

  // The response to one request (what the stream sends for it).
  grpc::reflection::v1::ServerReflectionResponse Answer(
      const grpc::reflection::v1::ServerReflectionRequest& request) const;

 private:
  const std::vector<std::string> services_;
  const google::protobuf::DescriptorPool* const pool_;
};

}  // namespace kvserve::server::grpc_api
