// FakeSessionsService: an in-memory kvserve.v1.Sessions with predictable answers, served by the
// client tests' FakeServer; the fake Generation service runs session turns through it.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "fake_replica.h"
#include "kvserve/v1/session.grpc.pb.h"

namespace kvserve::client::testing {

// Sessions over a map of id to Session:
// - CreateSession: cache_implementation "unknown" is INVALID_ARGUMENT naming
//   options.cache.cache_implementation; prefix "missing" is NOT_FOUND "prefix 'missing' is not
//   registered". Otherwise a session with id "%032x" of the number of sessions created so far
//   (1, 2, ...), state EMPTY, num_tokens kFakePrefixTokens with a prefix (0 without),
//   created_at = last_used_at = kFakeCreatedAtSeconds plus the number of earlier creations,
//   expires_at ttl later, and the options with defaults applied (cache_implementation
//   "dynamic", ttl_seconds kFakeDefaultTtlSeconds).
// - GetSession, CloseSession, RollbackSession: NOT_FOUND "session 'ID' is not open" for an
//   unknown id. RollbackSession: n outside [1, num_tokens - its prefix's tokens] is
//   INVALID_ARGUMENT "n: ..."; otherwise num_tokens and cached_tokens shrink by n (to at most).
// - ListSessions: every session, oldest first.
// Every call is served as `replica` (its routing key logged, the replica's id sent back).
class FakeSessionsService final : public v1::Sessions::CallbackService {
 public:
  explicit FakeSessionsService(FakeReplica* replica) : replica_(replica) {}

  static constexpr int32_t kFakePrefixTokens = 4;
  static constexpr int64_t kFakeDefaultTtlSeconds = 600;
  static constexpr int64_t kFakeCreatedAtSeconds = 1700000000;  // 2023-11-14T22:13:20Z

  grpc::ServerUnaryReactor* CreateSession(grpc::CallbackServerContext* context,
                                          const v1::CreateSessionRequest* request,
                                          v1::Session* response) override;
  grpc::ServerUnaryReactor* GetSession(grpc::CallbackServerContext* context,
                                       const v1::GetSessionRequest* request,
                                       v1::Session* response) override;
  grpc::ServerUnaryReactor* ListSessions(grpc::CallbackServerContext* context,
                                         const v1::ListSessionsRequest* request,
                                         v1::ListSessionsResponse* response) override;
  grpc::ServerUnaryReactor* CloseSession(grpc::CallbackServerContext* context,
                                         const v1::CloseSessionRequest* request,
                                         v1::CloseSessionResponse* response) override;
  grpc::ServerUnaryReactor* RollbackSession(grpc::CallbackServerContext* context,
                                            const v1::RollbackSessionRequest* request,
                                            v1::Session* response) override;

  // A turn of `prompt_tokens` that generated `completion_tokens` on the session `id`: its
  // cached tokens (the history's tokens, at most prompt_tokens); the session's history becomes
  // the turn's prompt and answer, all cached, state IDLE, one more turn. NOT_FOUND as above.
  // Thread-safe.
  absl::StatusOr<int32_t> RunTurn(const std::string& id, int32_t prompt_tokens,
                                  int32_t completion_tokens);

  // The last CreateSessionRequest received, as it arrived; empty before the first.
  v1::CreateSessionRequest last_create_request() const;

 private:
  FakeReplica* const replica_;  // not owned
  mutable absl::Mutex mu_;
  std::map<std::string, v1::Session> sessions_ ABSL_GUARDED_BY(mu_);
  int64_t creations_ ABSL_GUARDED_BY(mu_) = 0;
  v1::CreateSessionRequest last_create_request_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvserve::client::testing
