// ChatSession: the client side of a conversation on a kvserve session (what kvctl chat runs):
// the messages so far, the tokens each turn added to the session's history, and the calls that
// open, run, roll back and close the session, made through ChatRpcs so that the bookkeeping is
// tested without a server.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/client.h"
#include "kvserve/v1/generation.pb.h"
#include "kvserve/v1/session.pb.h"

namespace kvserve::client {

// The calls a chat makes. Each blocks until the call ends and returns the server's error (or
// UNAVAILABLE when it cannot be reached) as an absl::Status.
class ChatRpcs {
 public:
  virtual ~ChatRpcs() = default;
  // Sessions.CreateSession: the new session.
  virtual absl::StatusOr<v1::Session> CreateSession(const v1::CreateSessionRequest& request) = 0;
  // Sessions.CloseSession.
  virtual absl::Status CloseSession(const std::string& id) = 0;
  // Sessions.RollbackSession: the session after dropping its last `n` tokens.
  virtual absl::StatusOr<v1::Session> RollbackSession(const std::string& id, int32_t n) = 0;
  // Generation.GenerateStream: calls `on_message` with each message as it arrives, on the
  // calling thread; OK once the stream is complete.
  virtual absl::Status GenerateStream(
      const v1::GenerateRequest& request,
      absl::FunctionRef<void(const v1::GenerateStreamResponse&)> on_message) = 0;
};

// ChatRpcs through a Client, every call with the same CallOptions (deadline, routing key).
class ClientChatRpcs final : public ChatRpcs {
 public:
  // Uses `client` (not owned; it must outlive this).
  ClientChatRpcs(const Client* client, CallOptions options)
      : client_(client), options_(std::move(options)) {}

  absl::StatusOr<v1::Session> CreateSession(const v1::CreateSessionRequest& request) override;
  absl::Status CloseSession(const std::string& id) override;
  absl::StatusOr<v1::Session> RollbackSession(const std::string& id, int32_t n) override;
  absl::Status GenerateStream(
      const v1::GenerateRequest& request,
      absl::FunctionRef<void(const v1::GenerateStreamResponse&)> on_message) override;

 private:
  const Client* const client_;
  const CallOptions options_;
};

// What a chat sends besides the conversation.
struct ChatOptions {
  // Sent for every session the chat opens (the first one and each Reset's).
  v1::CreateSessionRequest create;
  // The content of the system message every conversation starts with; empty: none.
  std::string system;
  // Every turn's sampling; nullopt (default): unset, the server's defaults.
  std::optional<v1::SamplingParams> sampling;
  // Every turn's GenerateRequest.template_kwargs (a JSON object); empty: none.
  std::string template_kwargs;
};

// What one turn did.
struct ChatTurn {
  int number = 0;    // its place in the conversation: 1 for the first exchange
  std::string text;  // the answer, as the conversation now holds it
  v1::FinishReason finish_reason = v1::FINISH_REASON_UNSPECIFIED;
  v1::Usage usage;  // of the stream's last message, as are timings and cache_report
  v1::Timings timings;
  v1::CacheReport cache_report;
};

// What a rollback did.
struct ChatRollback {
  int turns = 0;       // exchanges dropped from the conversation
  int32_t tokens = 0;  // tokens RollbackSession dropped; 0 when it was not called
  // The session after RollbackSession; nullopt when it was not called (the turns had added no
  // tokens by their usage, as when a template shortens earlier turns).
  std::optional<v1::Session> session = std::nullopt;
};

// A conversation on one session at a time. The conversation is the system message (if any),
// then a user and an assistant message per exchange; every turn sends it whole as `messages`
// (the session reuses its cache for the common prefix), so the conversation, not the token
// count, decides what the model sees. Not thread-safe: one thread drives it.
class ChatSession {
 public:
  // Uses `rpcs` (not owned; it must outlive this). Opens nothing.
  ChatSession(ChatRpcs* rpcs, ChatOptions options);

  // Opens a session (CreateSession with options.create) when none is open; the conversation
  // starts over with only the system message. The new session; the server's error leaves no
  // session open. FailedPrecondition when one is already open.
  absl::StatusOr<v1::Session> Open();

  // Runs `user_text` as the next turn: GenerateStream with the conversation and the user's
  // message as `messages`, the session's id, and the options' sampling and template kwargs;
  // calls `on_text` with each piece of the answer as it arrives. On success the user's message
  // and the answer (an assistant message) join the conversation, and the session's history is
  // taken to hold the turn's prompt_tokens + completion_tokens. On failure (FailedPrecondition
  // when no session is open, the server's error, Internal when the stream ended without its
  // last message) the conversation and the token counts are unchanged.
  absl::StatusOr<ChatTurn> Send(const std::string& user_text,
                                absl::FunctionRef<void(absl::string_view)> on_text);

  // Drops the last `turns` exchanges from the conversation and the tokens they added from the
  // session's history: RollbackSession with history_tokens() now minus history_tokens() after
  // the exchange before them (after none: the new session's num_tokens, its prefix's tokens),
  // not called when that is <= 0. InvalidArgument when `turns` is not in [1, num_turns()]; the
  // server's error leaves everything unchanged.
  absl::StatusOr<ChatRollback> Rollback(int turns);

  // Closes the session (a NotFound is ignored: it may have expired) and opens another with the
  // same options; the conversation starts over with only the system message. The new session.
  // When closing fails otherwise, everything is unchanged; when opening fails, no session is
  // open (Send fails until a Reset succeeds).
  absl::StatusOr<v1::Session> Reset();

  // Closes the session, if one is open, and empties the conversation; the server's error (the
  // session is forgotten all the same).
  absl::Status Close();

  // The open session's id; empty when none is open.
  const std::string& session_id() const { return session_id_; }
  // The conversation: the system message (if any), then user and assistant messages.
  const v1::ChatMessages& messages() const { return messages_; }
  // Exchanges in the conversation.
  int num_turns() const;
  // Tokens of the session's history by the turns' usage: after the last turn its prompt_tokens +
  // completion_tokens; before any, the session's num_tokens when it was opened. 0 when no
  // session is open.
  int32_t history_tokens() const;

 private:
  // Forgets the session and starts the conversation over with only the system message.
  void Forget();

  ChatRpcs* const rpcs_;
  const ChatOptions options_;
  std::string session_id_;
  v1::ChatMessages messages_;
  // [k]: the history's tokens after k exchanges ([0]: when the session was opened); one entry
  // per exchange plus one while a session is open, none otherwise.
  std::vector<int32_t> history_tokens_;
};

}  // namespace kvserve::client
