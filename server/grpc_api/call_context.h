// CallContext: what every kvserve RPC shares: its request id, the routing key it was sent
// with, the trailing metadata that says which replica served it, the one place where an
// exception escaping a handler becomes INTERNAL, and the CallTracker that gives every call
// its access-log line and counts its outcome.
#pragma once

#include <grpcpp/server_context.h>
#include <grpcpp/support/server_interceptor.h>
#include <grpcpp/support/status.h>

#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "server/api_keys.h"

namespace kvserve::server {
class ServerMetrics;
}  // namespace kvserve::server

namespace kvserve::server::grpc_api {

// Metadata keys (gRPC metadata keys are lower case).
inline constexpr char kRouteKeyMetadata[] = "x-kvserve-route";     // client → server
inline constexpr char kReplicaMetadata[] = "x-kvserve-replica";    // server → client (trailer)
inline constexpr char kRequestIdMetadata[] = "x-request-id";       // both ways
inline constexpr char kAuthorizationMetadata[] = "authorization";  // Bearer API key

// The identity of this replica, shared by the services. Thread-safe.
class ReplicaIdentity {
 public:
  // --replica-id, or the address the server listens on once it is bound.
  void Set(std::string replica_id) {
    absl::MutexLock lock(&mu_);
    replica_id_ = std::move(replica_id);
  }
  // Empty until Set.
  std::string Get() const {
    absl::MutexLock lock(&mu_);
    return replica_id_;
  }

 private:
  mutable absl::Mutex mu_;
  std::string replica_id_ ABSL_GUARDED_BY(mu_);
};

// What a generation call's handler knows of its request once the engine finished it.
struct GenerationUsage {
  std::string finish_reason;  // "length", "stop", "eos", "cancelled"
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;
  int64_t completion_tokens = 0;
  double queue_ms = 0;  // arrival to admission; 0 when it was never admitted
  double ttft_ms = 0;   // arrival to the first token; 0 when none was generated
};

// One kvserve call, shared by the CallTracker's interceptor (which made it, and times, logs
// and counts the call when its status is sent) and the handler serving it. Thread-safe.
class CallRecord {
 public:
  CallRecord(std::string request_id, std::string method, std::string peer)
      : request_id_(std::move(request_id)), method_(std::move(method)), peer_(std::move(peer)) {}

  const std::string& request_id() const { return request_id_; }
  // The RPC's name ("Generate"); its service's name is not part of it.
  const std::string& method() const { return method_; }
  const std::string& peer() const { return peer_; }

  // The caller's tenant (kDefaultTenant until set).
  void SetTenant(std::string tenant) ABSL_LOCKS_EXCLUDED(mu_);
  // The caller, authenticated: its tenant and role.
  void SetPrincipal(const Principal& principal) ABSL_LOCKS_EXCLUDED(mu_);
  // The caller's role: kAdmin until set (a server that authenticates nobody trusts everyone).
  Role role() const ABSL_LOCKS_EXCLUDED(mu_);
  // The call may not be served (UNAUTHENTICATED: no valid API key): handlers finish it with
  // this status instead (see CallerDenied).
  void Deny(absl::Status status) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status denied() const ABSL_LOCKS_EXCLUDED(mu_);
  std::string tenant() const ABSL_LOCKS_EXCLUDED(mu_);
  // The request reached Engine::Submit, which counts it in kvserve_requests_total (refused
  // there, or at its end); the tracker then does not count it again.
  void MarkCountedByEngine() ABSL_LOCKS_EXCLUDED(mu_);
  bool counted_by_engine() const ABSL_LOCKS_EXCLUDED(mu_);
  // The engine's summary of a finished generation. Set before the call's Finish.
  void SetGeneration(GenerationUsage usage) ABSL_LOCKS_EXCLUDED(mu_);
  std::optional<GenerationUsage> generation() const ABSL_LOCKS_EXCLUDED(mu_);
  // The prompt's tokens of a generation request once it is parsed (before it is submitted),
  // so that its access-log line has them when it ends without a summary (refused by the
  // engine, cancelled, failed). nullopt until set.
  void SetPromptTokens(int64_t prompt_tokens) ABSL_LOCKS_EXCLUDED(mu_);
  std::optional<int64_t> prompt_tokens() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const std::string request_id_;
  const std::string method_;
  const std::string peer_;
  mutable absl::Mutex mu_;
  std::string tenant_ ABSL_GUARDED_BY(mu_) = kDefaultTenant;
  Role role_ ABSL_GUARDED_BY(mu_) = Role::kAdmin;
  bool counted_by_engine_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status denied_ ABSL_GUARDED_BY(mu_);
  std::optional<GenerationUsage> generation_ ABSL_GUARDED_BY(mu_);
  std::optional<int64_t> prompt_tokens_ ABSL_GUARDED_BY(mu_);
};

// The record of the call `context` serves, or null when no CallTracker sees the call (a
// server built without one). Any thread, while the call lasts.
std::shared_ptr<CallRecord> FindCallRecord(const grpc::ServerContextBase* context);

// Why the call `context` serves may not be served (its record's denial), OK when it may (or
// when no CallTracker sees it). Every handler of a kvserve service checks it first.
absl::Status CallerDenied(const grpc::ServerContextBase* context);

// The caller of the call `context` serves: its record's tenant and role, or {kDefaultTenant,
// kAdmin} when no CallTracker sees it.
Principal CallerOf(const grpc::ServerContextBase* context);

// How callers are identified (see CallTracker).
struct CallerIdentification {
  // --api-keys-file; null: no keys.
  const ApiKeyRegistry* keys = nullptr;
  // --tenant-from-client-cert: a call without an API key is made for the tenant its verified
  // client certificate's subject CN names (role user; admin when listed in cert_admins).
  bool tenant_from_client_cert = false;
  std::vector<std::string> cert_admins;  // --client-cert-admins

  // Whether any caller is authenticated (otherwise every call is {kDefaultTenant, kAdmin}).
  bool enabled() const { return keys != nullptr || tenant_from_client_cert; }
};

// A gRPC server interceptor factory (ServerBuilder::experimental().SetInterceptorCreators)
// for the calls of kvserve's own services (health and reflection are left alone). Each call
// gets a CallRecord before its handler runs, with its request id (see BeginCall), which the
// initial metadata carries as x-request-id. When its status is sent, the call gets:
//   - one access-log line (LogAccess): request id, tenant, method, peer, outcome, total time,
//     the error message of a failure, and the fields the call has (generations: tokens, and
//     the queue time and TTFT it reached; a generation without a summary: its prompt's tokens
//     when it was parsed; other methods: none);
//   - kvserve_rpcs_total{method,code};
//   - for Generate and GenerateStream, kvserve_requests_total{outcome} when the engine did not
//     count it (refused before it was submitted: malformed, unknown prefix, model loading, an
//     escaped exception), kvserve_tenant_requests_total{tenant,outcome} always, and, when it
//     finished, kvserve_e2e_request_latency_seconds and kvserve_request_prefill_time_seconds.
// `metrics` must outlive the server. Thread-safe.
//
// With `identification` enabled, each call is authenticated before its handler runs: from its
// `authorization: Bearer KEY` metadata when keys are configured and it sends one (or must:
// keys without certificate tenants), else from its client certificate's subject CN
// (tenant_from_client_cert). The caller's tenant and role become the record's; a call that
// cannot be identified is denied (UNAUTHENTICATED; see CallerDenied).
class CallTracker final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit CallTracker(ServerMetrics* metrics, const ApiKeyRegistry* keys = nullptr)
      : metrics_(metrics) {
    identification_.keys = keys;
  }
  CallTracker(ServerMetrics* metrics, CallerIdentification identification)
      : metrics_(metrics), identification_(std::move(identification)) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;

 private:
  ServerMetrics* const metrics_;
  CallerIdentification identification_;
};

// Starts a call: picks its request id (its CallRecord's; without one, the client's
// x-request-id when it is 1 to 64 characters of [A-Za-z0-9._:-], else a fresh one), adds the
// trailing metadata x-kvserve-replica and x-request-id, and logs the method and routing key at
// debug level. Returns the request id. Call once per call, on the handler's thread, before
// Finish.
std::string BeginCall(grpc::CallbackServerContext* context, const ReplicaIdentity& replica,
                      std::string_view method);

// The request id of a call whose client sent `client_id` as x-request-id (empty: none): the
// client's when it is 1 to 64 characters of [A-Za-z0-9._:-], else NewRequestId().
std::string RequestIdFor(std::string_view client_id);

// A fresh request id: 16 hex digits, unique within the process and unlikely to repeat
// across processes.
std::string NewRequestId();

// The status a client gets for an exception that escaped a handler: INTERNAL naming the
// request id (and nothing of the server's internals); the exception is logged with the id.
absl::Status InternalErrorFor(std::string_view request_id, std::string_view method,
                              const std::exception* exception);

}  // namespace kvserve::server::grpc_api
