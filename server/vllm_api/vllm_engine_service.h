// VllmEngineService: the vLLM engine protocol (vllm.grpc.engine.VllmEngine, what `vllm serve
// --grpc` serves and the SMG model gateway speaks) on kvserve's gRPC port: generation on token
// ids, load, health, model and server info, and the prefix cache's KV events. What each field
// means here is in server/vllm_api/README.md.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "server/grpc_api/attached.h"
#include "server/grpc_api/call_context.h"
#include "server/request_builder.h"
#include "server/scheduler.h"
#include "vllm/grpc/engine/vllm_engine.grpc.pb.h"

namespace kvserve::server {
class Engine;
class KvEventPublisher;
class ServerMetrics;
}  // namespace kvserve::server

namespace kvserve::server::vllm_api {

namespace vpb = ::vllm::grpc::engine;
namespace cpb = ::smg::grpc::common;

// What the service serves once the model is loaded.
struct VllmServed {
  Engine* engine = nullptr;                 // must outlive the service
  const RequestBuilder* builder = nullptr;  // must outlive the service
  // GetModelInfo's answer (model_path, served_model_name, context, vocabulary, special tokens).
  vpb::GetModelInfoResponse model_info;
  // The scheduler's --max-batch-size (GetLoads' max_running_requests).
  int64_t max_running_requests = 0;
  // The engine's clock: arrivals and deadlines are stamped in its time.
  const base::Clock* clock = base::RealClock::Get();
};

// Handlers never block and never touch a tensor. Until Attach every call but HealthCheck is
// UNAVAILABLE (HealthCheck answers healthy=false). Callers are authenticated as for kvserve.v1
// (CallTracker); generations run in the caller's tenant namespace; SubscribeKvEvents shows
// every namespace's blocks to admins and the shared namespace's to other callers.
class VllmEngineService final : public vpb::VllmEngine::CallbackService {
 public:
  // `replica`, `publisher` and `metrics` must outlive the service.
  VllmEngineService(const grpc_api::ReplicaIdentity* replica, KvEventPublisher* publisher,
                    ServerMetrics* metrics, std::string version);
  ~VllmEngineService() override;
  // Starts serving `served`. Call once; thread-safe.
  void Attach(VllmServed served) { served_.Attach(std::move(served)); }

  grpc::ServerWriteReactor<vpb::GenerateResponse>* Generate(
      grpc::CallbackServerContext* context, const vpb::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* HealthCheck(grpc::CallbackServerContext* context,
                                        const vpb::HealthCheckRequest* request,
                                        vpb::HealthCheckResponse* response) override;
  grpc::ServerUnaryReactor* Abort(grpc::CallbackServerContext* context,
                                  const vpb::AbortRequest* request,
                                  vpb::AbortResponse* response) override;
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* context,
                                         const vpb::GetModelInfoRequest* request,
                                         vpb::GetModelInfoResponse* response) override;
  grpc::ServerUnaryReactor* GetServerInfo(grpc::CallbackServerContext* context,
                                          const vpb::GetServerInfoRequest* request,
                                          vpb::GetServerInfoResponse* response) override;
  grpc::ServerUnaryReactor* GetLoads(grpc::CallbackServerContext* context,
                                     const vpb::GetLoadsRequest* request,
                                     vpb::GetLoadsResponse* response) override;
  grpc::ServerWriteReactor<cpb::KvEventBatch>* SubscribeKvEvents(
      grpc::CallbackServerContext* context, const cpb::SubscribeKvEventsRequest* request) override;

  // The engine's id of a live Generate by its request_id, for Abort. Any thread.
  void Track(const std::string& request_id, RequestId id) ABSL_LOCKS_EXCLUDED(mu_);
  void Untrack(const std::string& request_id) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const grpc_api::ReplicaIdentity* const replica_;
  KvEventPublisher* const publisher_;
  ServerMetrics* const metrics_;
  const std::string version_;
  const absl::Time started_ = absl::Now();
  grpc_api::Attached<VllmServed> served_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, RequestId> live_ ABSL_GUARDED_BY(mu_);
  absl::Time last_receive_ ABSL_GUARDED_BY(mu_) = absl::UnixEpoch();
};

// The typed input of a VllmEngine GenerateRequest, or InvalidArgument naming the field (in the
// protocol's names: "sampling_params.n") for what kvserve does not do. Exposed for tests.
absl::StatusOr<GenerationInput> ToGenerationInput(const vpb::GenerateRequest& request);

}  // namespace kvserve::server::vllm_api
