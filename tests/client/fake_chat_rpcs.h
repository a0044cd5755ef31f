// FakeChatRpcs: a scripted ChatRpcs that records every call, for testing ChatSession and kvctl
// chat's loop without a server.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "client/chat_session.h"

namespace kvserve::client::testing {

// How the next GenerateStream call goes.
struct ScriptedTurn {
  std::vector<std::string> pieces;  // the answer's text, one stream message each
  int32_t prompt_tokens = 0;        // usage of the last message
  int32_t cached_tokens = 0;
  int32_t completion_tokens = 0;
  double ttft_ms = 0;
  std::string recompute_reason = {};  // cache_report.session_recompute_reason
  // When not OK: the call fails with it after the pieces, and no last message is sent.
  absl::Status error = absl::OkStatus();
  // false: the stream ends, OK, without its last message (usage and the rest).
  bool send_last = true;
};

class FakeChatRpcs final : public ChatRpcs {
 public:
  // Sessions are "s1", "s2", ... in creation order, with `session_tokens` tokens when created.
  // The next `create_errors`, `close_errors` and `rollback_errors` (front first) fail those
  // calls; GenerateStream follows `turns` (front first) and fails with FailedPrecondition
  // "unscripted turn" when none is left. A rollback's session has num_tokens = the last turn's
  // prompt + completion tokens (session_tokens before any) minus the tokens rolled back so far.
  absl::StatusOr<v1::Session> CreateSession(const v1::CreateSessionRequest& request) override;
  absl::Status CloseSession(const std::string& id) override;
  absl::StatusOr<v1::Session> RollbackSession(const std::string& id, int32_t n) override;
  absl::Status GenerateStream(
      const v1::GenerateRequest& request,
      absl::FunctionRef<void(const v1::GenerateStreamResponse&)> on_message) override;

  // Script.
  int32_t session_tokens = 0;
  std::deque<absl::Status> create_errors;
  std::deque<absl::Status> close_errors;
  std::deque<absl::Status> rollback_errors;
  std::deque<ScriptedTurn> turns;

  // Record, in call order.
  std::vector<v1::CreateSessionRequest> creates;
  std::vector<std::string> closes;
  std::vector<std::pair<std::string, int32_t>> rollbacks;  // id, n
  std::vector<v1::GenerateRequest> generates;

 private:
  static absl::Status Pop(std::deque<absl::Status>& errors);

  int sessions_created_ = 0;
  int32_t num_tokens_ = 0;
};

}  // namespace kvserve::client::testing
