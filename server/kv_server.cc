// KvServer: building, starting and stopping the whole server.
#include "server/kv_server.h"

#include <grpc/grpc.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <netdb.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "cache/cache_factory.h"
#include "cache/kv_cache_manager.h"
#include "cache/retention.h"
#include "cache/torch_compat.h"
#include "grpc_health/v1/health.pb.h"
#include "kvserve/v1/generation.grpc.pb.h"
#include "kvserve/v1/prefix.grpc.pb.h"
#include "kvserve/v1/session.grpc.pb.h"
#include "model/embedded_model.h"
#include "model/generator.h"
#include "model/mamba_model.h"
#include "model/transformer.h"
#include "server/api_keys.h"
#include "server/engine.h"
#include "server/grpc_api/cache_admin_service.h"
#include "server/grpc_api/call_context.h"
#include "server/grpc_api/generation_service.h"
#include "server/grpc_api/prefix_service.h"
#include "server/grpc_api/proto_inputs.h"
#include "server/grpc_api/session_service.h"
#include "server/http_api/http_server.h"
#include "server/kv_event_publisher.h"
#include "server/metrics.h"
#include "server/metrics_http_server.h"
#include "server/model_fingerprint.h"
#include "server/prefix_journal.h"
#include "server/prefix_persistence.h"
#include "server/prefixes_file.h"
#include "server/request_builder.h"
#include "server/tenant_limits.h"
#include "server/vllm_api/vllm_engine_service.h"
#include "tokenizer/tokenizer.h"

#ifdef KVSERVE_OWN_REFLECTION_V1
#include "server/grpc_api/server_reflection_v1.h"
#endif

// The project's version (CMake's PROJECT_VERSION).
#ifndef KVSERVE_VERSION
#define KVSERVE_VERSION "unknown"
#endif

namespace kvserve::server {
namespace {

absl::StatusOr<at::ScalarType> ParseDtype(const std::string& name) {
  if (name == "float32") return at::kFloat;
  if (name == "bfloat16") return at::kBFloat16;
  if (name == "float16") return at::kHalf;
  return absl::InvalidArgumentError(
      absl::StrCat("--dtype '", name, "' is not one of float32, bfloat16, float16"));
}

std::string DtypeName(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
      return "float32";
    case at::kBFloat16:
      return "bfloat16";
    case at::kHalf:
      return "float16";
    default:
      return std::string(c10::toString(dtype));
  }
}

v1::ModelInfo ToProto(const model::ModelInfo& info, const std::string& name,
                      const RequestLimits& limits) {
  v1::ModelInfo out;
  out.set_name(name);
  out.set_model_type(info.model_type);
  out.set_vocab_size(static_cast<int32_t>(info.vocab_size));
  out.set_num_layers(static_cast<int32_t>(info.num_layers));
  out.set_num_kv_heads(static_cast<int32_t>(info.num_kv_heads));
  out.set_head_dim(static_cast<int32_t>(info.head_dim));
  out.set_max_position_embeddings(static_cast<int32_t>(info.max_position_embeddings));
  for (const cache::LayerSpec& layer : info.layer_specs) {
    v1::LayerInfo* l = out.add_layers();
    l->set_type(cache::LayerTypeName(layer.type));
    l->set_window(layer.window);
  }
  for (int32_t id : info.eos_token_ids) out.add_eos_token_ids(id);
  if (info.bos_token_id) out.set_bos_token_id(*info.bos_token_id);
  out.set_dtype(DtypeName(info.dtype));
  out.set_weight_dtype(DtypeName(info.weight_dtype));
  out.set_bf16_activations(info.bf16_activations);
  out.set_device(info.device.str());
  out.set_max_new_tokens_limit(static_cast<int32_t>(limits.max_new_tokens_limit));
  return out;
}

// The engine's persistence, written to a PrefixJournal: a prefix is recorded by its token ids,
// so that a restart registers exactly what was served without tokenizing again.
class JournalPersistence final : public PrefixPersistence {
 public:
  explicit JournalPersistence(PrefixJournal* journal) : journal_(journal) {}

  void RecordPut(const std::string& name, std::vector<int32_t> token_ids,
                 const cache::NamedPrefixOptions& options, absl::Time created_at,
                 Done done) override {
    v1::PrefixOptions wire;
    wire.set_pinned(options.pinned);
    if (!options.pinned) {
      wire.set_retention(std::string(cache::RetentionClassName(options.retention)));
    }
    if (options.ttl != absl::InfiniteDuration()) {
      wire.set_ttl_seconds(absl::ToInt64Seconds(absl::Ceil(options.ttl, absl::Seconds(1))));
    }
    wire.set_cache_implementation(options.cache_implementation);
    v1::RegisterPrefixRequest request;
    request.set_name(name);
    request.mutable_token_ids()->mutable_ids()->Add(token_ids.begin(), token_ids.end());
    *request.mutable_options() = wire;
    journal_->RecordPut(request, wire, created_at, std::move(done));
  }
  void RecordDelete(const std::string& name, Done done) override {
    journal_->RecordDelete(name, std::move(done));
  }

 private:
  PrefixJournal* const journal_;
};

// --prefix-cache-bytes when not given: on a GPU a quarter of the KV device budget (snapshots
// share it with live caches); on the CPU four full-context prompts of this model, within
// [64 MiB, 1 GiB], so that a small model's server stays small.
int64_t DefaultPrefixCacheBytes(const model::ModelInfo& info, int64_t kv_device_limit) {
  if (info.device.is_cuda() && kv_device_limit > 0)
    return std::max<int64_t>(kv_device_limit / 4, 1);
  const int64_t per_token = 2 * info.num_layers * info.num_kv_heads * info.head_dim *
                            static_cast<int64_t>(c10::elementSize(info.dtype));
  return std::clamp<int64_t>(4 * per_token * info.max_position_embeddings, int64_t{64} << 20,
                             int64_t{1} << 30);
}

// What BindFailureReason says when a plain bind() of the address works.
constexpr std::string_view kGrpcCouldNotBind = "gRPC could not bind it";

// The gRPC port's credentials: TLS with the files' certificate and key (and client
// certificates required and verified against the client CA, when given); else plaintext.
std::shared_ptr<grpc::ServerCredentials> ServerCredentials(const ServerOptions& options,
                                                           const TlsFiles& files) {
  if (!options.tls()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions ssl(
      files.client_ca_pem.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                  : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  ssl.pem_root_certs = files.client_ca_pem;
  ssl.pem_key_cert_pairs.push_back({files.private_key_pem, files.cert_chain_pem});
  return grpc::SslServerCredentials(ssl);
}

// Why gRPC could not listen on `address` (HOST:PORT or [IPV6]:PORT, checked by
// ServerOptions): what a plain bind() of it answers, such as "Address already in use" (gRPC
// itself says only that it failed).
std::string BindFailureReason(const std::string& address) {
  std::string_view host = address;
  std::string_view port;
  const size_t colon = host.rfind(':');
  if (colon == std::string_view::npos || address.rfind("unix:", 0) == 0) {
    return "the address cannot be bound";
  }
  port = host.substr(colon + 1);
  host = host.substr(0, colon);
  if (host.starts_with('[') && host.ends_with(']')) host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* resolved = nullptr;
  const std::string host_text(host);
  const std::string port_text(port);
  if (::getaddrinfo(host_text.c_str(), port_text.c_str(), &hints, &resolved) != 0 ||
      resolved == nullptr) {
    return "the host does not resolve to an address of this machine";
  }
  std::string reason(kGrpcCouldNotBind);
  for (const addrinfo* ai = resolved; ai != nullptr; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    const bool bound = ::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0;
    const int bind_errno = errno;
    ::close(fd);
    if (!bound) {
      reason = std::strerror(bind_errno);
      if (bind_errno == EADDRINUSE) reason += " (another process listens on this port)";
      break;
    }
  }
  ::freeaddrinfo(resolved);
  return reason;
}

}  // namespace

std::string BoundAddress(const std::string& listen, int port) {
  if (listen.rfind("unix:", 0) == 0) return listen;
  return absl::StrCat(listen.substr(0, listen.rfind(':')), ":", port);
}

BuildVersions GetBuildVersions() {
  // compat::BuildDescription() says "LibTorch 2.6.0, CUDA 12.4" or "LibTorch 1.13.0, CPU only".
  const std::string description = compat::BuildDescription();
  constexpr std::string_view kTorch = "LibTorch ";
  constexpr std::string_view kCuda = ", CUDA ";
  BuildVersions versions{.kvserve = KVSERVE_VERSION, .torch = "unknown", .cuda = "none"};
  if (description.rfind(kTorch, 0) == 0) {
    versions.torch = description.substr(kTorch.size(), description.find(',') - kTorch.size());
  }
  if (const size_t at = description.find(kCuda); at != std::string::npos) {
    versions.cuda = description.substr(at + kCuda.size());
  }
  return versions;
}

namespace {

// kvserve's own services: each has a health status of its own.
const std::vector<std::string>& KvserveServices() {
  static const std::vector<std::string> names = {
      v1::Generation::service_full_name(), v1::PrefixCache::service_full_name(),
      v1::Sessions::service_full_name(), v1::CacheAdmin::service_full_name(),
      vllm::grpc::engine::VllmEngine::service_full_name()};
  return names;
}

// What the vLLM engine protocol serves (GetModelInfo's answer among it).
vllm_api::VllmServed ToVllmServed(const model::ModelInfo& info, const std::string& name,
                                  const ServerOptions& options, Engine* engine,
                                  const RequestBuilder* builder) {
  vllm_api::VllmServed served;
  served.engine = engine;
  served.builder = builder;
  served.max_running_requests = options.scheduler.max_batch_size;
  served.clock = options.clock;
  vllm::grpc::engine::GetModelInfoResponse& m = served.model_info;
  m.set_model_path(options.model_dir);
  m.set_is_generation(true);
  m.set_max_context_length(static_cast<uint32_t>(info.max_position_embeddings));
  m.set_vocab_size(static_cast<uint32_t>(info.vocab_size));
  m.set_served_model_name(name);
  m.set_tokenizer_path(options.model_dir);
  m.set_model_type(info.model_type);
  m.mutable_eos_token_ids()->Add(info.eos_token_ids.begin(), info.eos_token_ids.end());
  m.set_bos_token_id(info.bos_token_id.value_or(-1));
  m.set_pad_token_id(-1);
  m.set_max_req_input_len(static_cast<int32_t>(info.max_position_embeddings - 1));
  return served;
}

// Runs one short generation straight on the model, before the engine exists, so that the
// first client does not pay for lazy initialisation (allocator pools, thread pools, kernels).
// It is not a request: no metric counts it and no injected fault reaches it.
absl::Status WarmUp(model::Model& model) {
  const model::ModelInfo& info = model.info();
  model::GenerateOptions options;
  options.max_new_tokens = std::min<int64_t>(2, info.max_position_embeddings - 1);
  options.ignore_eos = true;
  if (options.max_new_tokens < 1) return absl::OkStatus();
  absl::StatusOr<std::unique_ptr<cache::KvCache>> cache =
      cache::MakeCache(cache::CacheSpec(), info.layer_specs);
  if (!cache.ok()) return cache.status();
  const int32_t prompt[1] = {info.bos_token_id.value_or(0)};
  try {
    return model::Generate(model, prompt, cache->get(), options).status();
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("the warm-up generation failed: ", e.what_without_backtrace()));
  }
}

}  // namespace

LoadedModel::LoadedModel() = default;
LoadedModel::~LoadedModel() = default;
LoadedModel::LoadedModel(LoadedModel&&) = default;
LoadedModel& LoadedModel::operator=(LoadedModel&&) = default;

absl::StatusOr<LoadedModel> LoadModel(const ServerOptions& options) {
  const int threads = options.threads > 0
                          ? options.threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  compat::SetNumThreads(threads);
  model::TransformerOptions transformer;
  absl::StatusOr<at::ScalarType> dtype = ParseDtype(options.dtype);
  if (!dtype.ok()) return dtype.status();
  transformer.dtype = *dtype;
  absl::StatusOr<std::optional<at::ScalarType>> weight_dtype =
      model::ParseWeightDtype(options.weight_dtype);
  if (!weight_dtype.ok()) return weight_dtype.status();
  transformer.weight_dtype = *weight_dtype;
  absl::StatusOr<model::Bf16Compute> bf16_compute = model::ParseBf16Compute(options.bf16_compute);
  if (!bf16_compute.ok()) return bf16_compute.status();
  transformer.bf16_compute = *bf16_compute;
  try {
    transformer.device = c10::Device(options.device);
  } catch (const c10::Error&) {
    return absl::InvalidArgumentError(
        absl::StrCat("--device '", options.device, "' is not a device (cpu, cuda, cuda:0)"));
  }
  absl::StatusOr<base::ModelSource> source =
      options.model_dir.empty() ? model::EmbeddedDefaultModel()
                                : base::ModelSource::FromDirectory(options.model_dir);
  if (!source.ok()) return source.status();
  LoadedModel loaded;
  absl::StatusOr<std::unique_ptr<model::Model>> transformer_model =
      model::LoadModel(*source, transformer);
  if (!transformer_model.ok()) return transformer_model.status();
  loaded.model = *std::move(transformer_model);
  if (source->Has("tokenizer.json")) {
    absl::StatusOr<std::unique_ptr<tokenizer::Tokenizer>> tokenizer =
        tokenizer::Tokenizer::FromModelSource(*source);
    if (!tokenizer.ok()) return tokenizer.status();
    // Ids past the embedding table, or a template every chat request would fail on, are
    // refused now rather than at the first request.
    if (absl::Status fits = (*tokenizer)->CheckFitsModel(loaded.model->info().vocab_size);
        !fits.ok()) {
      return fits;
    }
    if (absl::Status chat = (*tokenizer)->CheckChatTemplate(); !chat.ok()) return chat;
    loaded.tokenizer = *std::move(tokenizer);
  }
  absl::StatusOr<std::string> fingerprint = ModelFingerprint(*source, loaded.model->info());
  if (!fingerprint.ok()) return fingerprint.status();
  loaded.fingerprint = *std::move(fingerprint);
  loaded.name =
      options.model_dir.empty()
          ? "embedded-tiny"
          : std::filesystem::path(options.model_dir).lexically_normal().filename().string();
  if (loaded.name.empty()) {
    loaded.name = std::filesystem::path(options.model_dir)
                      .lexically_normal()
                      .parent_path()
                      .filename()
                      .string();
  }
  return loaded;
}

KvServer::KvServer(const ServerOptions& options)
    : options_(options),
      metrics_(std::make_unique<ServerMetrics>(options.limits.max_new_tokens_limit)),
      replica_(std::make_unique<grpc_api::ReplicaIdentity>()),
      generation_(std::make_unique<grpc_api::GenerationService>(replica_.get())),
      prefixes_(std::make_unique<grpc_api::PrefixService>(replica_.get())),
      sessions_(std::make_unique<grpc_api::SessionService>(replica_.get())),
      cache_admin_(std::make_unique<grpc_api::CacheAdminService>(replica_.get())) {
  const BuildVersions versions = GetBuildVersions();
  // Options are validated before a server is made: the buffer size is in range.
  kv_events_ = *KvEventPublisher::Create(
      {.buffer_batches = options.kv_events_buffer,
       .sequence_base = static_cast<uint64_t>(absl::ToUnixMillis(absl::Now())) * 1000});
  vllm_ = std::make_unique<vllm_api::VllmEngineService>(replica_.get(), kv_events_.get(),
                                                        metrics_.get(), versions.kvserve);
  metrics_->SetBuildInfo(versions.kvserve, versions.torch, versions.cuda);
  metrics_->SetKvDeviceBudget(0, options.kv_device_bytes);
}

absl::Status KvServer::ReloadApiKeys() {
  if (api_keys_ == nullptr) return absl::OkStatus();
  absl::Status reloaded = api_keys_->Reload();
  if (reloaded.ok()) {
    metrics_->SetTenants(api_keys_->keys()->tenants());
    spdlog::info("API keys: {} from {}", api_keys_->keys()->size(), api_keys_->path());
  }
  return reloaded;
}

absl::StatusOr<std::unique_ptr<KvServer>> KvServer::Start(const ServerOptions& options) {
  absl::Status valid = options.Validate();
  if (!valid.ok()) return valid;
  // The TLS files are read before anything listens, so that a bad one fails the start alone.
  absl::StatusOr<TlsFiles> tls_files = ReadTlsFiles(options);
  if (!tls_files.ok()) return tls_files.status();
  std::unique_ptr<KvServer> server(new KvServer(options));
  if (!options.api_keys_file.empty()) {
    absl::StatusOr<std::unique_ptr<ApiKeyRegistry>> keys =
        ApiKeyRegistry::Open(options.api_keys_file);
    if (!keys.ok()) return keys.status();
    server->api_keys_ = *std::move(keys);
    server->metrics_->SetTenants(server->api_keys_->keys()->tenants());
    spdlog::info("API keys: {} from {}", server->api_keys_->keys()->size(), options.api_keys_file);
  }
  if (!options.metrics_listen.empty()) {
    ServerMetrics* metrics = server->metrics_.get();
    absl::StatusOr<std::unique_ptr<MetricsHttpServer>> http = MetricsHttpServer::Start(
        options.metrics_listen, [metrics] { return metrics->TextFormat(); });
    if (!http.ok()) return http.status();
    server->metrics_server_ = *std::move(http);
    server->metrics_port_ = server->metrics_server_->port();
  }
  if (!options.http_listen.empty()) {
    http_api::HttpApiOptions http{.listen = options.http_listen,
                                  .tls_cert_file = options.tls_cert_file,
                                  .tls_key_file = options.tls_key_file,
                                  .tls_client_ca_file = options.tls_client_ca_file,
                                  .workers = options.http_workers,
                                  .max_body_bytes = options.http_max_body_bytes,
                                  .keys = server->api_keys_.get(),
                                  .tenant_from_client_cert = options.tenant_from_client_cert,
                                  .cert_admins = options.client_cert_admins,
                                  .metrics = server->metrics_.get()};
    absl::StatusOr<std::unique_ptr<http_api::HttpApiServer>> started =
        http_api::HttpApiServer::Start(std::move(http));
    if (!started.ok()) return started.status();
    server->http_ = *std::move(started);
    spdlog::info("OpenAI-compatible HTTP API on {} (port {})", options.http_listen,
                 server->http_->port());
  }
  grpc::EnableDefaultHealthCheckService(true);
  // gRPC's health service is built without protobuf descriptors: reflection resolves
  // grpc.health.v1.Health from the copy of the protocol in proto/, linked in by this use.
  (void)grpc::health::v1::HealthCheckRequest::descriptor();
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, ServerCredentials(options, *tls_files), &server->port_);
  // Without SO_REUSEPORT a second server on a taken port fails to start instead of silently
  // sharing its connections.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.RegisterService(server->generation_.get());
  builder.RegisterService(server->prefixes_.get());
  builder.RegisterService(server->sessions_.get());
  builder.RegisterService(server->cache_admin_.get());
  builder.RegisterService(server->vllm_.get());
#ifdef KVSERVE_OWN_REFLECTION_V1
  // What gRPC's v1alpha plugin lists: every service registered, health and reflection too.
  std::vector<std::string> listed = KvserveServices();
  listed.insert(listed.end(), {"grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection",
                               "grpc.reflection.v1alpha.ServerReflection"});
  server->reflection_v1_ = std::make_unique<grpc_api::ServerReflectionV1>(std::move(listed));
  builder.RegisterService(server->reflection_v1_.get());
#endif
  // Prompts may be long token-id lists or long chat transcripts; gRPC refuses a bigger
  // message with RESOURCE_EXHAUSTED before it is parsed.
  builder.SetMaxReceiveMessageSize(static_cast<int>(options.max_request_bytes));
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> trackers;
  grpc_api::CallerIdentification identification;
  identification.keys = server->api_keys_.get();
  identification.tenant_from_client_cert = options.tenant_from_client_cert;
  identification.cert_admins = options.client_cert_admins;
  trackers.push_back(
      std::make_unique<grpc_api::CallTracker>(server->metrics_.get(), identification));
  builder.experimental().SetInterceptorCreators(std::move(trackers));
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    std::string reason = BindFailureReason(options.listen);
    // gRPC also refuses the port when its TLS credentials cannot be made (a key that does not
    // match the certificate, a certificate it cannot parse) and says so only in its own log.
    if (options.tls() && reason == kGrpcCouldNotBind) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tls-cert-file '", options.tls_cert_file, "' and --tls-key-file '",
                       options.tls_key_file, "': gRPC cannot serve TLS with them on --listen '",
                       options.listen, "' (does the key match the certificate? are they valid?)"));
    }
    return absl::UnavailableError(
        absl::StrCat("--listen '", options.listen, "': cannot listen: ", reason));
  }
  // The server as a whole ("") and each kvserve service by name; the calls that change them
  // all (Serve, Shutdown) reach every name set here.
  grpc::HealthCheckServiceInterface* health = server->server_->GetHealthCheckService();
  for (const std::string& name : KvserveServices()) health->SetServingStatus(name, false);
  health->SetServingStatus(false);
  server->address_ = BoundAddress(options.listen, server->port_);
  server->replica_->Set(options.replica_id.empty() ? server->address_ : options.replica_id);
  return server;
}

KvServer::~KvServer() {
  Shutdown(absl::ZeroDuration());
  server_.reset();
  absl::MutexLock lock(&mu_);
  engine_.reset();
}

absl::Status KvServer::Serve(LoadedModel loaded) {
  absl::MutexLock lock(&mu_);
  if (serving_ || shut_down_) {
    return absl::FailedPreconditionError("the server already serves a model or has shut down");
  }
  model_ = std::move(loaded);
  const model::ModelInfo& info = model_.model->info();
  std::vector<v1::RegisterPrefixRequest> listed;
  if (!options_.prefixes_file.empty()) {
    absl::StatusOr<std::vector<v1::RegisterPrefixRequest>> read =
        ReadPrefixesFile(options_.prefixes_file);
    if (!read.ok()) return read.status();
    listed = *std::move(read);
  }
  if (!options_.state_dir.empty()) {
    absl::StatusOr<std::unique_ptr<PrefixJournal>> journal =
        PrefixJournal::Open({.state_dir = options_.state_dir, .clock = options_.clock});
    if (!journal.ok()) return journal.status();
    journal_ = *std::move(journal);
    persistence_ = std::make_unique<JournalPersistence>(journal_.get());
  }
  EngineOptions engine_options;
  engine_options.scheduler = options_.scheduler;
  engine_options.max_forced_tokens = options_.max_forced_tokens;
  engine_options.model_fingerprint = model_.fingerprint;
  engine_options.persistence = persistence_.get();
  engine_options.clock = options_.clock;
  engine_options.event_consumers = {kv_events_.get()};
  cache::KvCacheManagerOptions& kv = engine_options.kv;
  kv.auto_prefix_cache = options_.auto_prefix_cache;
  kv.auto_prefix_min_tokens = options_.auto_prefix_min_tokens;
  kv.prefix_kv_mode = options_.prefix_kv_mode;
  kv.sessions.idle_offload = options_.session_idle_offload;
  kv.sessions.cache_bytes = options_.session_cache_bytes;
  kv.sessions.default_ttl = options_.session_ttl;
  kv.sessions.max_sessions = options_.max_sessions;
  kv.sessions.max_ttl = options_.session_max_ttl;
  kv.tiers.host_bytes = options_.prefix_host_bytes;
  kv.tiers.disk_bytes = options_.prefix_disk_bytes;
  kv.tiers.disk_dir = options_.prefix_disk_dir;
  kv.tiers.half_life = options_.prefix_retention_half_life;
  kv.tiers.device = info.device.str();
  kv.tiers.log = [](const std::string& line) { spdlog::warn("{}", line); };
  kv.budget.device_limit_bytes = options_.kv_device_bytes;
  if (options_.kv_device_bytes < 0) {
    // On a GPU the KV caches get most of what is free once the weights are loaded.
    const int64_t free_bytes = compat::DeviceFreeMemoryBytes(info.device);
    if (free_bytes > 0) kv.budget.device_limit_bytes = free_bytes / 10 * 9;
  }
  kv.budget.fault_inject_oom_rate = options_.fault_inject_oom_rate;
  metrics_->SetKvDeviceBudget(0, kv.budget.device_limit_bytes);
  kv.prefix_cache_bytes = options_.prefix_cache_bytes > 0
                              ? options_.prefix_cache_bytes
                              : DefaultPrefixCacheBytes(info, kv.budget.device_limit_bytes);
  // With API keys, the limits not given are fair shares: no tenant can hold all of a resource.
  const int64_t num_key_tenants =
      api_keys_ == nullptr ? 0 : static_cast<int64_t>(api_keys_->keys()->tenants().size());
  const TenantLimits tenant_limits =
      ResolveTenantLimits(options_, num_key_tenants, kv.prefix_cache_bytes);
  kv.sessions.max_sessions_per_tenant = tenant_limits.max_sessions;
  kv.tenant_prefix_bytes = tenant_limits.max_prefix_bytes;
  engine_options.scheduler.max_queued_per_tenant = tenant_limits.max_queued_requests;
  spdlog::info("{}", DescribeTenantLimits(tenant_limits, options_, num_key_tenants));
  if (absl::Status warm = WarmUp(*model_.model); !warm.ok()) return warm;
  absl::StatusOr<std::unique_ptr<Engine>> engine =
      Engine::Create(engine_options, model_.model.get(), model_.tokenizer.get(), metrics_.get());
  if (!engine.ok()) return engine.status();
  engine_ = *std::move(engine);
  Engine* const engine_ptr = engine_.get();
  builder_ = std::make_unique<RequestBuilder>(
      model_.model->info(), model_.tokenizer.get(), options_.limits,
      [engine_ptr] { return engine_ptr->catalog(); },
      [engine_ptr](const std::string& id) { return engine_ptr->sessions().Find(id); });
  // Prefixes live before a restart, then the deployment's list; health stays NOT_SERVING
  // until they are all warm. What the state holds never stops the start-up: a prefix that no
  // longer registers (another model, a smaller cache) is skipped with a warning.
  if (journal_ != nullptr) {
    for (const RecoveredPrefix& recovered : journal_->recovered()) {
      v1::RegisterPrefixRequest request = recovered.request;
      *request.mutable_options() = recovered.options;
      if (recovered.options.ttl_seconds() > 0) {
        // The TTL counts from the first registration, not from the restart.
        const int64_t left = absl::ToInt64Seconds(recovered.created_at +
                                                  absl::Seconds(recovered.options.ttl_seconds()) -
                                                  options_.clock->Now());
        if (left < 1) continue;
        request.mutable_options()->set_ttl_seconds(left);
      }
      if (absl::Status registered = RegisterAtStartup(request); !registered.ok()) {
        spdlog::warn("prefix '{}' from the state directory was not registered again: {}",
                     request.name(), std::string(registered.message()));
      }
    }
  }
  for (const v1::RegisterPrefixRequest& prefix : listed) {
    absl::Status registered = RegisterAtStartup(prefix);
    if (!registered.ok()) {
      return absl::Status(registered.code(),
                          absl::StrCat("prefix '", prefix.name(), "': ", registered.message()));
    }
  }
  generation_->Attach(
      {engine_.get(), builder_.get(), ToProto(info, model_.name, options_.limits), options_.clock});
  prefixes_->Attach({engine_.get(), builder_.get()});
  sessions_->Attach({engine_.get(), builder_.get()});
  if (http_ != nullptr) {
    http_->Attach({.engine = engine_.get(),
                   .builder = builder_.get(),
                   .tokenizer = model_.tokenizer.get(),
                   .model_name = model_.name,
                   .clock = options_.clock});
  }
  cache_admin_->Attach({.engine = engine_.get(), .sequence_base = kv_events_->sequence_base()});
  vllm_->Attach(ToVllmServed(info, model_.name, options_, engine_.get(), builder_.get()));
  metrics_->SetServedModelName(model_.name);
  serving_ = true;
  server_->GetHealthCheckService()->SetServingStatus(true);
  spdlog::info("serving {} ({} layers, vocab {}) on {}; prefix cache {} bytes", model_.name,
               info.num_layers, info.vocab_size, info.device.str(), kv.prefix_cache_bytes);
  return absl::OkStatus();
}

absl::Status KvServer::RegisterAtStartup(const v1::RegisterPrefixRequest& request) {
  // The state directory records qualified names ("<tenant>/<name>", or "<name>" for shared
  // prefixes); the prefixes file's names are shared.
  const auto [space, name] = cache::SplitQualifiedPrefixName(request.name());
  if (!space.empty() && !IsValidTenantName(space)) {
    return absl::InvalidArgumentError(
        absl::StrCat("name: '", std::string(space.substr(0, 64)), "' is not a tenant name"));
  }
  RegistrationInput input = grpc_api::ToInput(request);
  input.name = std::string(name);
  input.shared = space.empty();
  const BuildContext context{.caller = {.tenant = std::string(space), .role = Role::kAdmin}};
  absl::StatusOr<PrefixRegistration> parsed = builder_->Registration(input, context);
  if (!parsed.ok()) return parsed.status();
  absl::Notification done;
  absl::Status status;
  engine_->RegisterPrefix(
      parsed->name, parsed->token_ids, parsed->strategy, parsed->options,
      [&](absl::StatusOr<cache::PrefixInfo> info) {
        status = info.status();
        done.Notify();
      },
      parsed->encoder_ids);
  done.WaitForNotification();
  return status;
}

int KvServer::http_port() const { return http_ != nullptr ? http_->port() : 0; }

Engine* KvServer::engine() const {
  absl::MutexLock lock(&mu_);
  return engine_.get();
}

void KvServer::Shutdown(absl::Duration grace) {
  absl::MutexLock shutdown_lock(&shutdown_mu_);
  Engine* engine = nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
    engine = engine_.get();
  }
  if (server_ == nullptr) return;
  server_->GetHealthCheckService()->SetServingStatus(false);
  // The engine ends every live request (they finish their gRPC calls) before gRPC stops, so
  // clients get their output or CANCELLED with partial output, never a dropped connection.
  if (engine != nullptr) engine->Shutdown(grace);
  // The engine makes no record any more: every queued one is written (and answered) while
  // the engine its callbacks reach still exists.
  if (journal_ != nullptr) (void)journal_->Flush();
  kv_events_->Close();  // KV-event streams end rather than hold the shutdown up
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  if (http_ != nullptr) http_->Stop();
  metrics_server_.reset();
}

}  // namespace kvserve::server
