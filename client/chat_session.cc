// A conversation on a kvserve session (see chat_session.h).
#include "client/chat_session.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace kvserve::client {
namespace {

constexpr char kSystemRole[] = "system";
constexpr char kUserRole[] = "user";
constexpr char kAssistantRole[] = "assistant";

void AddMessage(v1::ChatMessages& messages, const std::string& role, const std::string& content) {
  v1::ChatMessage* message = messages.add_messages();
  message->set_role(role);
  message->set_content(content);
}

}  // namespace

absl::StatusOr<v1::Session> ClientChatRpcs::CreateSession(const v1::CreateSessionRequest& request) {
  return client_->CreateSession(request, options_);
}

absl::Status ClientChatRpcs::CloseSession(const std::string& id) {
  return client_->CloseSession(id, options_);
}

absl::StatusOr<v1::Session> ClientChatRpcs::RollbackSession(const std::string& id, int32_t n) {
  return client_->RollbackSession(id, n, options_);
}

absl::Status ClientChatRpcs::GenerateStream(
    const v1::GenerateRequest& request,
    absl::FunctionRef<void(const v1::GenerateStreamResponse&)> on_message) {
  return client_->GenerateStream(
      request,
      [&](const v1::GenerateStreamResponse& message) {
        on_message(message);
        return true;
      },
      options_);
}

ChatSession::ChatSession(ChatRpcs* rpcs, ChatOptions options)
    : rpcs_(rpcs), options_(std::move(options)) {
  Forget();
}

void ChatSession::Forget() {
  session_id_.clear();
  history_tokens_.clear();
  messages_.Clear();
  if (!options_.system.empty()) AddMessage(messages_, kSystemRole, options_.system);
}

absl::StatusOr<v1::Session> ChatSession::Open() {
  if (!session_id_.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("session ", session_id_, " is open"));
  }
  absl::StatusOr<v1::Session> session = rpcs_->CreateSession(options_.create);
  if (!session.ok()) return session.status();
  Forget();
  session_id_ = session->id();
  history_tokens_.push_back(session->num_tokens());
  return session;
}

int ChatSession::num_turns() const {
  return history_tokens_.empty() ? 0 : static_cast<int>(history_tokens_.size()) - 1;
}

int32_t ChatSession::history_tokens() const {
  return history_tokens_.empty() ? 0 : history_tokens_.back();
}

absl::StatusOr<ChatTurn> ChatSession::Send(const std::string& user_text,
                                           absl::FunctionRef<void(absl::string_view)> on_text) {
  if (session_id_.empty()) return absl::FailedPreconditionError("no session is open");
  v1::GenerateRequest request;
  *request.mutable_messages() = messages_;
  AddMessage(*request.mutable_messages(), kUserRole, user_text);
  request.set_session(session_id_);
  if (options_.sampling.has_value()) *request.mutable_sampling() = *options_.sampling;
  request.set_template_kwargs(options_.template_kwargs);

  ChatTurn turn;
  bool finished = false;
  const absl::Status status =
      rpcs_->GenerateStream(request, [&](const v1::GenerateStreamResponse& message) {
        if (!message.text().empty()) {
          turn.text += message.text();
          on_text(message.text());
        }
        // Only the last message carries usage.
        if (message.has_usage()) {
          finished = true;
          turn.finish_reason = message.finish_reason();
          turn.usage = message.usage();
          turn.timings = message.timings();
          turn.cache_report = message.cache_report();
        }
      });
  if (!status.ok()) return status;
  if (!finished) return absl::InternalError("the answer's stream ended without its last message");
  *messages_.mutable_messages() = request.messages().messages();
  AddMessage(messages_, kAssistantRole, turn.text);
  history_tokens_.push_back(turn.usage.prompt_tokens() + turn.usage.completion_tokens());
  turn.number = num_turns();
  return turn;
}

absl::StatusOr<ChatRollback> ChatSession::Rollback(int turns) {
  const int total = num_turns();
  if (turns < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the number of turns to roll back must be >= 1; got ", turns));
  }
  if (turns > total) {
    return absl::InvalidArgumentError(
        total == 0
            ? "there is no turn to roll back"
            : absl::StrCat("cannot roll back ", turns, " turns: the conversation has ", total));
  }
  ChatRollback rollback{.turns = turns};
  const int32_t tokens = history_tokens_[total] - history_tokens_[total - turns];
  if (tokens > 0) {
    absl::StatusOr<v1::Session> session = rpcs_->RollbackSession(session_id_, tokens);
    if (!session.ok()) return session.status();
    rollback.tokens = tokens;
    rollback.session = *std::move(session);
  }
  history_tokens_.resize(total - turns + 1);
  messages_.mutable_messages()->DeleteSubrange(messages_.messages_size() - 2 * turns, 2 * turns);
  return rollback;
}

absl::StatusOr<v1::Session> ChatSession::Reset() {
  if (!session_id_.empty()) {
    const absl::Status closed = rpcs_->CloseSession(session_id_);
    if (!closed.ok() && !absl::IsNotFound(closed)) return closed;
    Forget();
  }
  return Open();
}

absl::Status ChatSession::Close() {
  if (session_id_.empty()) return absl::OkStatus();
  const absl::Status closed = rpcs_->CloseSession(session_id_);
  Forget();
  return closed;
}

}  // namespace kvserve::client
