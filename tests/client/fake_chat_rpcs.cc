// The scripted ChatRpcs of the chat tests (see fake_chat_rpcs.h).
#include "fake_chat_rpcs.h"

#include "absl/strings/str_cat.h"

namespace kvserve::client::testing {

absl::Status FakeChatRpcs::Pop(std::deque<absl::Status>& errors) {
  if (errors.empty()) return absl::OkStatus();
  absl::Status status = errors.front();
  errors.pop_front();
  return status;
}

absl::StatusOr<v1::Session> FakeChatRpcs::CreateSession(const v1::CreateSessionRequest& request) {
  creates.push_back(request);
  if (absl::Status error = Pop(create_errors); !error.ok()) return error;
  v1::Session session;
  session.set_id(absl::StrCat("s", ++sessions_created_));
  *session.mutable_options() = request.options();
  session.set_num_tokens(session_tokens);
  num_tokens_ = session_tokens;
  return session;
}

absl::Status FakeChatRpcs::CloseSession(const std::string& id) {
  closes.push_back(id);
  return Pop(close_errors);
}

absl::StatusOr<v1::Session> FakeChatRpcs::RollbackSession(const std::string& id, int32_t n) {
  rollbacks.emplace_back(id, n);
  if (absl::Status error = Pop(rollback_errors); !error.ok()) return error;
  num_tokens_ -= n;
  v1::Session session;
  session.set_id(id);
  session.set_num_tokens(num_tokens_);
  return session;
}

absl::Status FakeChatRpcs::GenerateStream(
    const v1::GenerateRequest& request,
    absl::FunctionRef<void(const v1::GenerateStreamResponse&)> on_message) {
  generates.push_back(request);
  if (turns.empty()) return absl::FailedPreconditionError("unscripted turn");
  const ScriptedTurn turn = turns.front();
  turns.pop_front();
  for (const std::string& piece : turn.pieces) {
    v1::GenerateStreamResponse message;
    message.set_text(piece);
    on_message(message);
  }
  if (!turn.error.ok()) return turn.error;
  if (!turn.send_last) return absl::OkStatus();
  v1::GenerateStreamResponse last;
  last.set_finish_reason(v1::FINISH_REASON_EOS);
  last.mutable_usage()->set_prompt_tokens(turn.prompt_tokens);
  last.mutable_usage()->set_cached_tokens(turn.cached_tokens);
  last.mutable_usage()->set_completion_tokens(turn.completion_tokens);
  last.mutable_timings()->set_ttft_ms(turn.ttft_ms);
  last.mutable_cache_report()->set_session(request.session());
  last.mutable_cache_report()->set_session_recompute_reason(turn.recompute_reason);
  on_message(last);
  num_tokens_ = turn.prompt_tokens + turn.completion_tokens;
  return absl::OkStatus();
}

}  // namespace kvserve::client::testing
