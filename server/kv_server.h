// KvServer: the assembled kvserve process minus main(): gRPC server (Generation, health,
// reflection), Prometheus endpoint, engine and model, with start-up and graceful shutdown.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kvserve/v1/prefix.pb.h"
#include "server/server_options.h"

namespace grpc {
class Server;
class Service;
}  // namespace grpc
namespace kvserve::model {
class Model;
}  // namespace kvserve::model
namespace kvserve::tokenizer {
class Tokenizer;
}  // namespace kvserve::tokenizer

namespace kvserve::server {

namespace grpc_api {
class CacheAdminService;
class GenerationService;
class PrefixService;
class ReplicaIdentity;
class SessionService;
}  // namespace grpc_api
namespace http_api {
class HttpApiServer;
}  // namespace http_api
namespace vllm_api {
class VllmEngineService;
}  // namespace vllm_api

class ApiKeyRegistry;
class Engine;
class KvEventPublisher;
class MetricsHttpServer;
class PrefixJournal;
class PrefixPersistence;
class RequestBuilder;
class ServerMetrics;

// A model ready to serve.
struct LoadedModel {
  // Out of line: Model and Tokenizer are incomplete here.
  LoadedModel();
  ~LoadedModel();
  LoadedModel(LoadedModel&&);
  LoadedModel& operator=(LoadedModel&&);

  std::unique_ptr<model::Model> model;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;  // null when the folder has none
  std::string name;                                 // ModelInfo.name
  std::string fingerprint;                          // see ModelFingerprint
};

// This build's versions, as kvserve_build_info and `kvserve --version` report them.
struct BuildVersions {
  std::string kvserve;  // CMake's PROJECT_VERSION
  std::string torch;    // LibTorch's
  std::string cuda;     // "none" without CUDA
};
BuildVersions GetBuildVersions();

// The address clients reach a server on that listens on `listen` (--listen) and bound `port`:
// HOST:PORT or [IPV6]:PORT with the port gRPC chose for port 0; unix:PATH as given (gRPC has
// no port to report for a socket file).
std::string BoundAddress(const std::string& listen, int port);

// Loads --model (or the embedded tiny model) on --device in --dtype, with its tokenizer.
// Errors name the file and the problem.
absl::StatusOr<LoadedModel> LoadModel(const ServerOptions& options);

// Lifecycle: Start (port bound, health NOT_SERVING) → Serve (model attached and warm, health
// SERVING) → Shutdown. Thread-safe; Shutdown may come at any point.
class KvServer {
 public:
  // Binds --listen (and --metrics-listen) and starts answering: health NOT_SERVING and
  // Generation calls UNAVAILABLE until Serve. InvalidArgument naming the flag for options
  // Validate refuses; Unavailable naming the flag, the address and why (such as "Address
  // already in use": ports are not shared with other processes) when one cannot be bound.
  static absl::StatusOr<std::unique_ptr<KvServer>> Start(const ServerOptions& options);
  ~KvServer();

  // Serves `model`: runs one short warm-up generation on the model, builds the prefix store
  // and the engine, registers the prefixes of --state-dir and --prefixes-file, then reports
  // SERVING. FailedPrecondition when called twice or after Shutdown; the warm-up's or a
  // prefix's error otherwise (the server then stays NOT_SERVING).
  absl::Status Serve(LoadedModel model);

  // Health NOT_SERVING, no new requests; in-flight ones get up to `grace` to finish, then end
  // with finish_reason CANCELLED and their partial output; then the gRPC server stops.
  // Idempotent; blocks until done.
  void Shutdown(absl::Duration grace);

  // The bound gRPC port, and the metrics port (0 when --metrics-listen is off).
  int port() const { return port_; }
  // Where clients reach the gRPC port (BoundAddress): what the first stdout line names and the
  // default replica id.
  const std::string& address() const { return address_; }
  int metrics_port() const { return metrics_port_; }
  // The OpenAI-compatible HTTP port (0 when --http-listen is off).
  int http_port() const;
  // Null before Serve.
  Engine* engine() const;
  ServerMetrics& metrics() const { return *metrics_; }
  // Reads --api-keys-file again (SIGHUP); the keys in force stay when it fails. OK without
  // keys.
  absl::Status ReloadApiKeys();

 private:
  explicit KvServer(const ServerOptions& options);
  // Registers one prefix through the engine and waits for it (start-up only).
  absl::Status RegisterAtStartup(const v1::RegisterPrefixRequest& request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ServerOptions options_;
  std::unique_ptr<ServerMetrics> metrics_;
  std::unique_ptr<ApiKeyRegistry> api_keys_;            // null without --api-keys-file
  std::unique_ptr<grpc_api::ReplicaIdentity> replica_;  // before the services, which point at it
  std::unique_ptr<grpc_api::GenerationService> generation_;
  std::unique_ptr<grpc_api::PrefixService> prefixes_;
  std::unique_ptr<grpc_api::SessionService> sessions_;
  std::unique_ptr<grpc_api::CacheAdminService> cache_admin_;
  // The prefix store's KV events (an engine consumer) and the vLLM engine protocol.
  std::unique_ptr<KvEventPublisher> kv_events_;
  std::unique_ptr<vllm_api::VllmEngineService> vllm_;
  // grpc.reflection.v1 (ServerReflectionV1); null where gRPC's plugin serves it.
  std::unique_ptr<grpc::Service> reflection_v1_;
  std::unique_ptr<MetricsHttpServer> metrics_server_;
  std::unique_ptr<http_api::HttpApiServer> http_;  // null without --http-listen
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::string address_;
  int metrics_port_ = 0;

  mutable absl::Mutex mu_;  // guards the model state below and the lifecycle flags
  LoadedModel model_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<RequestBuilder> builder_ ABSL_GUARDED_BY(mu_);
  // With --state-dir: where the named prefixes are recorded (the engine's persistence).
  std::unique_ptr<PrefixJournal> journal_;
  std::unique_ptr<PrefixPersistence> persistence_;
  std::unique_ptr<Engine> engine_ ABSL_GUARDED_BY(mu_);
  bool serving_ ABSL_GUARDED_BY(mu_) = false;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  absl::Mutex shutdown_mu_;  // serializes Shutdown
};

}  // namespace kvserve::server
