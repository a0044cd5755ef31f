// GenerationService: the kvserve.v1.Generation gRPC service (callback API) in front of the
// engine: validates each request, submits it and streams the engine's output back.
#pragma once

#include <memory>
#include <string>

#include "base/clock.h"
#include "kvserve/v1/generation.grpc.pb.h"
#include "server/grpc_api/attached.h"
#include "server/grpc_api/call_context.h"
#include "server/request_builder.h"

namespace kvserve::server {
class Engine;
}  // namespace kvserve::server

namespace kvserve::server::grpc_api {

// What the service serves once the model is loaded.
struct ServedModel {
  Engine* engine = nullptr;                 // must outlive the service
  const RequestBuilder* builder = nullptr;  // must outlive the service
  v1::ModelInfo info;
  // The engine's clock: arrivals and deadlines are stamped in its time.
  const base::Clock* clock = base::RealClock::Get();
};

// Every method takes the request's raw bytes (see wire_codec.h), so that malformed bytes are
// INVALID_ARGUMENT rather than gRPC's own UNIMPLEMENTED.
using RawGenerationService = v1::Generation::WithRawCallbackMethod_Generate<
    v1::Generation::WithRawCallbackMethod_GenerateStream<
        v1::Generation::WithRawCallbackMethod_Tokenize<
            v1::Generation::WithRawCallbackMethod_GetModelInfo<v1::Generation::Service>>>>;

// Handlers never block and never touch a tensor: tokenization and validation run on the
// gRPC thread, generation on the engine thread. Until Attach every call is UNAVAILABLE, so
// the port can be bound (and health answered) while the model loads. Every response carries
// the trailing metadata of BeginCall (replica and request id).
class GenerationService final : public RawGenerationService {
 public:
  // `replica` must outlive the service.
  explicit GenerationService(const ReplicaIdentity* replica) : replica_(replica) {}

  // Starts serving `model`. Call once; thread-safe.
  void Attach(ServedModel model) { served_.Attach(std::move(model)); }

  grpc::ServerUnaryReactor* Generate(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* GenerateStream(
      grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* context,
                                         const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) override;

 private:
  const ReplicaIdentity* const replica_;
  Attached<ServedModel> served_;
};

}  // namespace kvserve::server::grpc_api
