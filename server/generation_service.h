// GenerationService: the kvserve.v1.Generation gRPC service (callback API) in front of the
// engine: validates each request, submits it and streams the engine's output back.
#pragma once

#include <memory>
#include <string>

#include "kvserve/v1/generation.grpc.pb.h"
#include "server/attached.h"
#include "server/request_parser.h"

namespace kvserve::server {

class Engine;

// What the service serves once the model is loaded.
struct ServedModel {
  Engine* engine = nullptr;               // must outlive the service
  const RequestParser* parser = nullptr;  // must outlive the service
  v1::ModelInfo info;
};

// Handlers never block and never touch a tensor: tokenization and validation run on the
// gRPC thread, generation on the engine thread. Until Attach every call is UNAVAILABLE, so
// the port can be bound (and health answered) while the model loads.
class GenerationService final : public v1::Generation::CallbackService {
 public:
  GenerationService() = default;

  // Starts serving `model`. Call once; thread-safe.
  void Attach(ServedModel model) { served_.Attach(std::move(model)); }

  grpc::ServerUnaryReactor* Generate(grpc::CallbackServerContext* context,
                                     const v1::GenerateRequest* request,
                                     v1::GenerateResponse* response) override;
  grpc::ServerWriteReactor<v1::GenerateStreamResponse>* GenerateStream(
      grpc::CallbackServerContext* context, const v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const v1::TokenizeRequest* request,
                                     v1::TokenizeResponse* response) override;
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* context,
                                         const v1::GetModelInfoRequest* request,
                                         v1::ModelInfo* response) override;

 private:
  Attached<ServedModel> served_;
};

}  // namespace kvserve::server
