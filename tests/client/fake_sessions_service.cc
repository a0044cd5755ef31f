// The client tests' in-memory Sessions (see fake_sessions_service.h).
#include "fake_sessions_service.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kvserve::client::testing {
namespace {

grpc::ServerUnaryReactor* FinishWith(grpc::CallbackServerContext* context,
                                     const grpc::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

grpc::Status NotFound(const std::string& id) {
  return grpc::Status(grpc::StatusCode::NOT_FOUND, absl::StrCat("session '", id, "' is not open"));
}

// Tokens of the session's prefix, which a rollback cannot drop.
int32_t PrefixTokens(const v1::Session& session) {
  return session.options().prefix().empty() ? 0 : FakeSessionsService::kFakePrefixTokens;
}

}  // namespace

grpc::ServerUnaryReactor* FakeSessionsService::CreateSession(
    grpc::CallbackServerContext* context, const v1::CreateSessionRequest* request,
    v1::Session* response) {
  replica_->Serve(context);
  absl::MutexLock lock(&mu_);
  last_create_request_ = *request;
  const v1::SessionOptions& options = request->options();
  if (options.cache().cache_implementation() == "unknown") {
    return FinishWith(context, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                            "options.cache.cache_implementation: unknown "
                                            "strategy"));
  }
  if (options.prefix() == "missing") {
    return FinishWith(
        context, grpc::Status(grpc::StatusCode::NOT_FOUND, "prefix 'missing' is not registered"));
  }
  v1::Session session;
  session.set_id(absl::StrFormat("%032x", ++creations_));
  *session.mutable_options() = options;
  v1::SessionOptions& resolved = *session.mutable_options();
  if (resolved.cache().cache_implementation().empty()) {
    resolved.mutable_cache()->set_cache_implementation("dynamic");
  }
  if (resolved.ttl_seconds() == 0) resolved.set_ttl_seconds(kFakeDefaultTtlSeconds);
  session.set_state(v1::SESSION_STATE_EMPTY);
  session.set_num_tokens(PrefixTokens(session));
  const int64_t created_at = kFakeCreatedAtSeconds + creations_ - 1;
  session.mutable_created_at()->set_seconds(created_at);
  session.mutable_last_used_at()->set_seconds(created_at);
  session.mutable_expires_at()->set_seconds(created_at + resolved.ttl_seconds());
  sessions_[session.id()] = session;
  *response = session;
  return FinishWith(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* FakeSessionsService::GetSession(grpc::CallbackServerContext* context,
                                                          const v1::GetSessionRequest* request,
                                                          v1::Session* response) {
  replica_->Serve(context);
  absl::MutexLock lock(&mu_);
  const auto it = sessions_.find(request->id());
  if (it == sessions_.end()) return FinishWith(context, NotFound(request->id()));
  *response = it->second;
  return FinishWith(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* FakeSessionsService::ListSessions(grpc::CallbackServerContext* context,
                                                            const v1::ListSessionsRequest* request,
                                                            v1::ListSessionsResponse* response) {
  replica_->Serve(context);
  absl::MutexLock lock(&mu_);
  // Ids count creations in fixed-width hex: their order is the creation order.
  for (const auto& [id, session] : sessions_) *response->add_sessions() = session;
  return FinishWith(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* FakeSessionsService::CloseSession(grpc::CallbackServerContext* context,
                                                            const v1::CloseSessionRequest* request,
                                                            v1::CloseSessionResponse* response) {
  replica_->Serve(context);
  absl::MutexLock lock(&mu_);
  if (sessions_.erase(request->id()) == 0) return FinishWith(context, NotFound(request->id()));
  return FinishWith(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* FakeSessionsService::RollbackSession(
    grpc::CallbackServerContext* context, const v1::RollbackSessionRequest* request,
    v1::Session* response) {
  replica_->Serve(context);
  absl::MutexLock lock(&mu_);
  const auto it = sessions_.find(request->id());
  if (it == sessions_.end()) return FinishWith(context, NotFound(request->id()));
  v1::Session& session = it->second;
  const int32_t droppable = session.num_tokens() - PrefixTokens(session);
  if (request->n() < 1 || request->n() > droppable) {
    return FinishWith(context, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                            absl::StrCat("n: must be in [1, ", droppable, "], got ",
                                                         request->n())));
  }
  session.set_num_tokens(session.num_tokens() - request->n());
  session.set_cached_tokens(std::min(session.cached_tokens(), session.num_tokens()));
  *response = session;
  return FinishWith(context, grpc::Status::OK);
}

absl::StatusOr<int32_t> FakeSessionsService::RunTurn(const std::string& id, int32_t prompt_tokens,
                                                     int32_t completion_tokens) {
  absl::MutexLock lock(&mu_);
  const auto it = sessions_.find(id);
  if (it == sessions_.end()) {
    return absl::NotFoundError(absl::StrCat("session '", id, "' is not open"));
  }
  v1::Session& session = it->second;
  const int32_t cached = std::min(session.num_tokens(), prompt_tokens);
  session.set_num_tokens(prompt_tokens + completion_tokens);
  session.set_cached_tokens(session.num_tokens());
  session.set_state(v1::SESSION_STATE_IDLE);
  session.set_turns(session.turns() + 1);
  return cached;
}

v1::CreateSessionRequest FakeSessionsService::last_create_request() const {
  absl::MutexLock lock(&mu_);
  return last_create_request_;
}

}  // namespace kvserve::client::testing
