// CallContext: request ids, routing-key logging, the served-by trailer, and the interceptor
// that logs and counts every call.
#include "server/grpc_api/call_context.h"

#include <google/protobuf/descriptor.h>
#include <grpcpp/security/auth_context.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <random>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "base/string_cat.h"
#include "server/client_certificate.h"
#include "server/logging.h"
#include "server/metrics.h"

namespace kvserve::server::grpc_api {
namespace {

constexpr size_t kMaxClientRequestIdChars = 64;
constexpr size_t kMaxLoggedRouteChars = 128;
// A method path a client sent for a method that does not exist is logged cut to this.
constexpr size_t kMaxLoggedMethodChars = 128;

bool IsAcceptableRequestId(std::string_view id) {
  if (id.empty() || id.size() > kMaxClientRequestIdChars) return false;
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == ':' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// The value of metadata `key` in `metadata`, or empty.
std::string_view MetadataValue(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata,
                               std::string_view key) {
  auto it = metadata.find(grpc::string_ref(key.data(), key.size()));
  if (it == metadata.end()) return {};
  return std::string_view(it->second.data(), it->second.size());
}

// The value of metadata `key` the client sent, or empty.
std::string_view ClientMetadata(const grpc::CallbackServerContext& context, std::string_view key) {
  return MetadataValue(context.client_metadata(), key);
}

// The records of the calls in flight, by their server context.
struct CallRegistry {
  absl::Mutex mu;
  absl::flat_hash_map<const grpc::ServerContextBase*, std::shared_ptr<CallRecord>> records
      ABSL_GUARDED_BY(mu);
};

CallRegistry& Calls() {
  static CallRegistry* const registry = new CallRegistry();
  return *registry;
}

uint64_t Mix(uint64_t x) {
  // splitmix64's finalizer: consecutive counters become unrelated-looking ids.
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

std::string NewRequestId() {
  static const uint64_t process_salt = [] {
    std::random_device device;
    return (static_cast<uint64_t>(device()) << 32) ^ device() ^
           static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  }();
  static std::atomic<uint64_t> counter{0};
  return absl::StrFormat("%016x", Mix(process_salt + counter.fetch_add(1)));
}

std::string RequestIdFor(std::string_view client_id) {
  return IsAcceptableRequestId(client_id) ? std::string(client_id) : NewRequestId();
}

std::string BeginCall(grpc::CallbackServerContext* context, const ReplicaIdentity& replica,
                      std::string_view method) {
  const std::shared_ptr<CallRecord> record = FindCallRecord(context);
  std::string request_id = record != nullptr
                               ? record->request_id()
                               : RequestIdFor(ClientMetadata(*context, kRequestIdMetadata));
  const std::string replica_id = replica.Get();
  if (!replica_id.empty()) context->AddTrailingMetadata(kReplicaMetadata, replica_id);
  context->AddTrailingMetadata(kRequestIdMetadata, request_id);
  if (spdlog::should_log(spdlog::level::debug)) {
    std::string_view route = ClientMetadata(*context, kRouteKeyMetadata);
    spdlog::debug("request {} {} from {} route '{}'", request_id, method, context->peer(),
                  route.substr(0, kMaxLoggedRouteChars));
  }
  return request_id;
}

absl::Status InternalErrorFor(std::string_view request_id, std::string_view method,
                              const std::exception* exception) {
  spdlog::error("request {} {}: unexpected exception: {}", request_id, method,
                exception != nullptr ? exception->what() : "(not a std::exception)");
  return absl::InternalError(base::Cat("internal error while serving ", method,
                                       "; the server logged it under request id ", request_id));
}

void CallRecord::SetTenant(std::string tenant) {
  absl::MutexLock lock(&mu_);
  tenant_ = std::move(tenant);
}

void CallRecord::SetPrincipal(const Principal& principal) {
  absl::MutexLock lock(&mu_);
  tenant_ = principal.tenant;
  role_ = principal.role;
}

Role CallRecord::role() const {
  absl::MutexLock lock(&mu_);
  return role_;
}

Principal CallerOf(const grpc::ServerContextBase* context) {
  std::shared_ptr<CallRecord> record = FindCallRecord(context);
  Principal caller;
  caller.tenant = kDefaultTenant;
  caller.role = Role::kAdmin;
  if (record != nullptr) {
    caller.tenant = record->tenant();
    caller.role = record->role();
  }
  return caller;
}

void CallRecord::Deny(absl::Status status) {
  absl::MutexLock lock(&mu_);
  denied_ = std::move(status);
}

absl::Status CallRecord::denied() const {
  absl::MutexLock lock(&mu_);
  return denied_;
}

absl::Status CallerDenied(const grpc::ServerContextBase* context) {
  std::shared_ptr<CallRecord> record = FindCallRecord(context);
  return record == nullptr ? absl::OkStatus() : record->denied();
}

std::string CallRecord::tenant() const {
  absl::MutexLock lock(&mu_);
  return tenant_;
}

void CallRecord::MarkCountedByEngine() {
  absl::MutexLock lock(&mu_);
  counted_by_engine_ = true;
}

bool CallRecord::counted_by_engine() const {
  absl::MutexLock lock(&mu_);
  return counted_by_engine_;
}

void CallRecord::SetGeneration(GenerationUsage usage) {
  absl::MutexLock lock(&mu_);
  generation_ = std::move(usage);
}

std::optional<GenerationUsage> CallRecord::generation() const {
  absl::MutexLock lock(&mu_);
  return generation_;
}

void CallRecord::SetPromptTokens(int64_t prompt_tokens) {
  absl::MutexLock lock(&mu_);
  prompt_tokens_ = prompt_tokens;
}

std::optional<int64_t> CallRecord::prompt_tokens() const {
  absl::MutexLock lock(&mu_);
  return prompt_tokens_;
}

std::shared_ptr<CallRecord> FindCallRecord(const grpc::ServerContextBase* context) {
  CallRegistry& calls = Calls();
  absl::MutexLock lock(&calls.mu);
  auto it = calls.records.find(context);
  return it == calls.records.end() ? nullptr : it->second;
}

namespace {

// One call of a kvserve service: registers its CallRecord once the client's metadata is in
// (before the handler runs), adds x-request-id to the initial metadata, and logs and counts
// the call when its status goes out (or, should none ever be sent, when the call is
// destroyed). gRPC runs one call's interceptions one after another.
class CallInterceptor final : public grpc::experimental::Interceptor {
 public:
  CallInterceptor(grpc::experimental::ServerRpcInfo* info, ServerMetrics* metrics,
                  const CallerIdentification* identification, std::string method, bool known,
                  bool generation)
      : context_(info->server_context()),
        metrics_(metrics),
        identification_(identification),
        method_(std::move(method)),
        known_(known),
        generation_(generation),
        start_(std::chrono::steady_clock::now()) {}

  ~CallInterceptor() override {
    if (record_ == nullptr) return;
    if (!closed_) {
      // gRPC ends a call whose deadline passes without the handler's status.
      const bool expired = context_->deadline() <= std::chrono::system_clock::now();
      Close(expired ? grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                                   "the call's deadline passed before it ended")
                    : grpc::Status(grpc::StatusCode::CANCELLED, "the call ended without a status"));
    }
    CallRegistry& calls = Calls();
    absl::MutexLock lock(&calls.mu);
    // A later call may have a context at the same address by now: remove only our own.
    auto it = calls.records.find(context_);
    if (it != calls.records.end() && it->second == record_) calls.records.erase(it);
  }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    using grpc::experimental::InterceptionHookPoints;
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_INITIAL_METADATA)) {
      Open(*methods->GetRecvInitialMetadata());
    }
    if (record_ != nullptr) {
      if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
        methods->GetSendInitialMetadata()->emplace(kRequestIdMetadata, record_->request_id());
      }
      if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS) &&
          !closed_) {
        Close(methods->GetSendStatus());
      }
    }
    methods->Proceed();
  }

 private:
  // The tenant the call's verified client certificate names (its subject's CN), or
  // UNAUTHENTICATED saying why there is none.
  absl::StatusOr<Principal> CertificatePrincipal() const {
    const std::shared_ptr<const grpc::AuthContext> auth = context_->auth_context();
    if (auth == nullptr || !auth->IsPeerAuthenticated()) {
      return absl::UnauthenticatedError(
          identification_->keys != nullptr
              ? "no API key: send 'authorization: Bearer <key>' or a client certificate"
              : "no verified client certificate: this server takes the tenant from it");
    }
    // gRPC's x509_common_name property holds the subject's first CN only: the certificate
    // itself tells whether there are more.
    const std::vector<grpc::string_ref> pems = auth->FindPropertyValues("x509_pem_cert");
    if (pems.size() != 1) {
      return absl::UnauthenticatedError("the client certificate cannot be read");
    }
    absl::StatusOr<std::string> common_name =
        SubjectCommonName(std::string_view(pems[0].data(), pems[0].size()));
    if (!common_name.ok()) return common_name.status();
    const std::string& cn = *common_name;
    if (cn == kDefaultTenant) {
      return absl::UnauthenticatedError(
          "the client certificate's subject CN 'default' is reserved (the tenant of calls "
          "made without API keys)");
    }
    if (!IsValidTenantName(cn)) {
      return absl::UnauthenticatedError(
          "the client certificate's subject CN is not a tenant name (1 to 64 characters of "
          "[A-Za-z0-9._-])");
    }
    Principal caller;
    caller.tenant = cn;
    caller.role =
        std::find(identification_->cert_admins.begin(), identification_->cert_admins.end(), cn) !=
                identification_->cert_admins.end()
            ? Role::kAdmin
            : Role::kUser;
    return caller;
  }

  void Open(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) {
    if (record_ != nullptr) return;
    record_ = std::make_shared<CallRecord>(
        RequestIdFor(MetadataValue(metadata, kRequestIdMetadata)), method_, context_->peer());
    if (identification_->enabled()) {
      const std::string_view authorization = MetadataValue(metadata, kAuthorizationMetadata);
      absl::StatusOr<Principal> caller;
      if (metadata.count(grpc::string_ref(kAuthorizationMetadata)) > 1) {
        // Which one would decide is the proxy's or the client's guess: none does.
        caller = absl::UnauthenticatedError(
            "more than one 'authorization' metadata value: send one 'authorization: Bearer KEY'");
      } else if (identification_->keys != nullptr &&
                 (!authorization.empty() || !identification_->tenant_from_client_cert)) {
        caller = identification_->keys->Authenticate(
            authorization.empty() ? std::nullopt : std::optional<std::string_view>(authorization));
      } else {
        caller = CertificatePrincipal();
      }
      if (caller.ok()) {
        record_->SetPrincipal(*caller);
      } else {
        // Logged as "-": no tenant; the handler refuses the call before anything runs.
        record_->SetPrincipal({.tenant = "-", .role = Role::kUser});
        record_->Deny(caller.status());
      }
    }
    CallRegistry& calls = Calls();
    absl::MutexLock lock(&calls.mu);
    calls.records[context_] = record_;
  }

  // Counts the call and writes its access-log line. Before the client hears the status, so
  // that metrics read after a reply include it.
  void Close(const grpc::Status& status) {
    closed_ = true;
    const double total_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const std::string code =
        absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code()));
    const std::string code_label = absl::AsciiStrToLower(code);
    const std::optional<GenerationUsage> usage = record_->generation();
    const std::string outcome =
        usage.has_value() && status.ok() ? usage->finish_reason : code_label;
    if (known_) metrics_->CountRpc(method_, code);
    if (generation_) {
      if (!record_->counted_by_engine()) metrics_->CountRequest(code_label);
      metrics_->CountTenantRequest(record_->tenant(), outcome);
      if (usage.has_value()) {
        metrics_->ObserveEndToEndLatency(total_seconds);
        if (usage->ttft_ms > 0) {
          metrics_->ObservePrefillTime(std::max(0.0, usage->ttft_ms - usage->queue_ms) / 1000);
        }
      }
    }
    AccessRecord line;
    line.request_id = record_->request_id();
    line.tenant = record_->tenant();
    line.method = method_;
    line.peer = record_->peer();
    line.outcome = outcome;
    line.code = code;
    line.error = status.error_message();
    if (usage.has_value()) {
      line.prompt_tokens = usage->prompt_tokens;
      line.cached_tokens = usage->cached_tokens;
      line.completion_tokens = usage->completion_tokens;
      // A request is admitted before its first token; one never admitted has neither time.
      if (usage->queue_ms > 0 || usage->ttft_ms > 0) line.queue_ms = usage->queue_ms;
      if (usage->ttft_ms > 0) line.ttft_ms = usage->ttft_ms;
    } else if (generation_) {
      line.prompt_tokens = record_->prompt_tokens();
    }
    line.total_ms = total_seconds * 1000;
    LogAccess(line);
  }

  grpc::ServerContextBase* const context_;
  ServerMetrics* const metrics_;
  const CallerIdentification* const identification_;
  const std::string method_;
  const bool known_;       // a method of a kvserve service (not a path a client made up)
  const bool generation_;  // Generate or GenerateStream
  const std::chrono::steady_clock::time_point start_;
  std::shared_ptr<CallRecord> record_;
  bool closed_ = false;
};

}  // namespace

grpc::experimental::Interceptor* CallTracker::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  // "/kvserve.v1.Generation/Generate", and the vLLM engine protocol kvserve serves
  // (server/vllm_api/); health and reflection are not ours to log.
  const std::string_view path = info->method() != nullptr ? info->method() : "";
  constexpr std::string_view kOurs = "/kvserve.";
  constexpr std::string_view kVllmEngine = "/vllm.grpc.engine.";
  if (!path.starts_with(kOurs) && !path.starts_with(kVllmEngine)) return nullptr;
  const size_t slash = path.rfind('/');
  const std::string_view service = path.substr(1, slash - 1);
  const std::string_view name = path.substr(slash + 1);
  const google::protobuf::MethodDescriptor* method =
      slash == 0 ? nullptr
                 : google::protobuf::DescriptorPool::generated_pool()->FindMethodByName(
                       base::Cat(service, ".", name));
  if (method == nullptr) {
    // A path the client made up: logged (cut), never a metric label.
    return new CallInterceptor(info, metrics_, &identification_,
                               std::string(path.substr(0, kMaxLoggedMethodChars)),
                               /*known=*/false, /*generation=*/false);
  }
  const bool generation =
      (service == "kvserve.v1.Generation" && (name == "Generate" || name == "GenerateStream")) ||
      (service == "vllm.grpc.engine.VllmEngine" && name == "Generate");
  return new CallInterceptor(info, metrics_, &identification_, method->name(), /*known=*/true,
                             generation);
}

}  // namespace kvserve::server::grpc_api
