// Client: a small synchronous C++ client of a kvserve server (kvserve.v1.Generation,
// kvserve.v1.PrefixCache, kvserve.v1.Sessions and grpc.health.v1.Health), with gRPC errors
// turned into absl::Status.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <grpcpp/security/credentials.h>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/connection_hint.h"
#include "grpc_health/v1/health.grpc.pb.h"
#include "kvserve/v1/generation.grpc.pb.h"
#include "kvserve/v1/prefix.grpc.pb.h"
#include "kvserve/v1/session.grpc.pb.h"

namespace kvserve::client {

// The gRPC metadata a client sends to say which replica of a fleet should serve a call: a
// gateway hashes it consistently onto the replicas, so that calls with one key keep reaching
// the replica whose prefix cache holds their shared prompt. kvserve only logs it.
inline constexpr char kRouteMetadataKey[] = "x-kvserve-route";
// The trailing metadata in which a kvserve replica names itself (its --replica-id).
inline constexpr char kReplicaMetadataKey[] = "x-kvserve-replica";
// The metadata that carries a client's API key, as "Bearer KEY" (kvserve --api-keys-file).
inline constexpr char kAuthorizationMetadataKey[] = "authorization";

// The kAuthorizationMetadataKey value that presents `api_key`: "Bearer " + api_key.
std::string BearerToken(const std::string& api_key);

// Options of one call.
struct CallOptions {
  // (Each field has an initializer so that designated initializers may name any subset.)
  // The call's deadline, counted from when it starts; nullopt (default): none.
  std::optional<absl::Duration> timeout = std::nullopt;
  // The routing key, sent as kRouteMetadataKey; empty (default): none is sent.
  std::string route{};
};

// How a channel is secured. Without a CA the channel is plaintext. The API key, when there is
// one, is sent on every call, whether the channel is TLS or not.
struct ChannelSecurity {
  // PEM CA certificates that verify the server; empty (default): a plaintext channel.
  std::string ca_pem{};
  // The client's certificate chain and private key (PEM) for mutual TLS; empty: none sent.
  std::string cert_pem{};
  std::string key_pem{};
  // The name the server's certificate must carry instead of the target's host; empty: the
  // target's host.
  std::string server_name{};
  // The API key every call presents as kAuthorizationMetadataKey "Bearer KEY"; empty
  // (default): none is sent.
  std::string api_key{};

  bool tls() const { return !ca_pem.empty(); }
};

// What a call learnt besides its answer.
struct CallInfo {
  // The replica that served the call (kReplicaMetadataKey); empty when the server sent none.
  std::string replica_id;
};

// The same code and message as `status` (gRPC and absl share the canonical codes).
absl::Status FromGrpcStatus(const grpc::Status& status);

// One connection to a kvserve server (or to a gateway in front of several). Every method blocks
// until the call ends, may be called from any number of threads at once, and returns the
// server's error (or UNAVAILABLE when the server cannot be reached, DEADLINE_EXCEEDED when the
// timeout passes) as an absl::Status. When `info` is not null, it receives what the call learnt,
// whether the call succeeded or not.
class Client {
 public:
  // Uses `channel` (shared with whoever else holds it); every call presents `api_key` (empty:
  // none) as kAuthorizationMetadataKey "Bearer KEY". With `mode`, how the channel is secured,
  // a failure to connect carries ConnectionFailureHint's explanation in its message.
  explicit Client(std::shared_ptr<grpc::Channel> channel, std::string api_key = {},
                  ChannelMode mode = ChannelMode::kUnknown);

  // A client on a channel to `target` ("host:port"), TLS when `security` has a CA, else
  // plaintext, whose every call presents security.api_key (if any); connects on the first
  // call. A call that fails to connect says what most likely happened (ConnectionFailureHint:
  // the server requires TLS, or a client certificate, or does not trust this one).
  static std::unique_ptr<Client> Connect(const std::string& target,
                                         const ChannelSecurity& security = {});
  // The channel credentials of `security` (plaintext without a CA).
  static std::shared_ptr<grpc::ChannelCredentials> Credentials(const ChannelSecurity& security);
  // How `security` secures a channel.
  static ChannelMode ModeOf(const ChannelSecurity& security);

  // Generation.Generate: the whole completion.
  absl::StatusOr<v1::GenerateResponse> Generate(const v1::GenerateRequest& request,
                                                const CallOptions& options = {},
                                                CallInfo* info = nullptr) const;

  // Generation.GenerateStream: calls `on_message` with each message as it arrives, on the
  // calling thread. When `on_message` returns false the call is cancelled and the result is
  // CANCELLED (or OK when the server had already finished). OK once the stream is complete.
  absl::Status GenerateStream(const v1::GenerateRequest& request,
                              absl::FunctionRef<bool(const v1::GenerateStreamResponse&)> on_message,
                              const CallOptions& options = {}, CallInfo* info = nullptr) const;

  // Generation.Tokenize.
  absl::StatusOr<v1::TokenizeResponse> Tokenize(const v1::TokenizeRequest& request,
                                                const CallOptions& options = {},
                                                CallInfo* info = nullptr) const;

  // Generation.GetModelInfo.
  absl::StatusOr<v1::ModelInfo> GetModelInfo(const CallOptions& options = {},
                                             CallInfo* info = nullptr) const;

  // PrefixCache.RegisterPrefix: the prefix as the server now holds it.
  absl::StatusOr<v1::Prefix> RegisterPrefix(const v1::RegisterPrefixRequest& request,
                                            const CallOptions& options = {},
                                            CallInfo* info = nullptr) const;

  // PrefixCache.GetPrefix: the prefix registered under `name` (NOT_FOUND when there is none).
  absl::StatusOr<v1::Prefix> GetPrefix(const std::string& name, const CallOptions& options = {},
                                       CallInfo* info = nullptr) const;

  // PrefixCache.ListPrefixes: every registered prefix, sorted by name.
  absl::StatusOr<v1::ListPrefixesResponse> ListPrefixes(const CallOptions& options = {},
                                                        CallInfo* info = nullptr) const;

  // PrefixCache.DeletePrefix: removes the prefix registered under `name` (NOT_FOUND when there
  // is none); `shared`: the shared prefix of that name (admins only).
  absl::Status DeletePrefix(const std::string& name, const CallOptions& options = {},
                            CallInfo* info = nullptr, bool shared = false) const;

  // Sessions.CreateSession: the new session (its id, options with defaults applied).
  absl::StatusOr<v1::Session> CreateSession(const v1::CreateSessionRequest& request,
                                            const CallOptions& options = {},
                                            CallInfo* info = nullptr) const;

  // Sessions.GetSession: the session `id` (NOT_FOUND when it was closed, expired or never
  // existed).
  absl::StatusOr<v1::Session> GetSession(const std::string& id, const CallOptions& options = {},
                                         CallInfo* info = nullptr) const;

  // Sessions.ListSessions: every open session, oldest first.
  absl::StatusOr<v1::ListSessionsResponse> ListSessions(const CallOptions& options = {},
                                                        CallInfo* info = nullptr) const;

  // Sessions.CloseSession: closes the session `id` and frees its cache (NOT_FOUND when there is
  // none).
  absl::Status CloseSession(const std::string& id, const CallOptions& options = {},
                            CallInfo* info = nullptr) const;

  // Sessions.RollbackSession: drops the last `n` tokens of the session's history; the session
  // as it is afterwards.
  absl::StatusOr<v1::Session> RollbackSession(const std::string& id, int32_t n,
                                              const CallOptions& options = {},
                                              CallInfo* info = nullptr) const;

  // grpc.health.v1.Health.Check of the server as a whole (empty service name).
  absl::StatusOr<grpc::health::v1::HealthCheckResponse::ServingStatus> CheckHealth(
      const CallOptions& options = {}, CallInfo* info = nullptr) const;

 private:
  // FromGrpcStatus(status), with the hint of a failed connection.
  absl::Status Failed(const grpc::Status& status) const;

  std::shared_ptr<grpc::Channel> channel_;
  const std::string api_key_;  // empty: none sent
  const ChannelMode mode_;
  std::unique_ptr<v1::Generation::Stub> generation_;
  std::unique_ptr<v1::PrefixCache::Stub> prefix_cache_;
  std::unique_ptr<v1::Sessions::Stub> sessions_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_;
};

}  // namespace kvserve::client
