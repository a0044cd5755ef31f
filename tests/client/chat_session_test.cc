// Tests of ChatSession's bookkeeping against a scripted ChatRpcs: what each turn sends, what a
// rollback of N turns computes and sends, reset and close, and that a failed call changes
// nothing.
#include "client/chat_session.h"

#include <string>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "fake_chat_rpcs.h"

namespace kvserve::client {
namespace {

using ::testing::ElementsAre;
using testing::FakeChatRpcs;
using ::testing::Pair;
using testing::ScriptedTurn;

// "role: content" of each message.
std::vector<std::string> Lines(const v1::ChatMessages& messages) {
  std::vector<std::string> lines;
  for (const v1::ChatMessage& message : messages.messages()) {
    lines.push_back(message.role() + ": " + message.content());
  }
  return lines;
}

ChatOptions Options() {
  ChatOptions options;
  options.create.mutable_options()->set_prefix("sys");
  options.create.mutable_options()->set_ttl_seconds(60);
  options.system = "Be brief.";
  v1::SamplingParams sampling;
  sampling.set_max_new_tokens(8);
  options.sampling = sampling;
  options.template_kwargs = R"({"enable_thinking":false})";
  return options;
}

class ChatSessionTest : public ::testing::Test {
 protected:
  ChatSessionTest() { rpcs_.session_tokens = 4; }

  // Sends `text` as a turn scripted to answer `answer` with the given token counts; the pieces
  // on_text received, joined by '|'.
  std::string Turn(const std::string& text, const std::string& answer, int32_t prompt_tokens,
                   int32_t completion_tokens) {
    rpcs_.turns.push_back({.pieces = {answer.substr(0, 1), answer.substr(1)},
                           .prompt_tokens = prompt_tokens,
                           .completion_tokens = completion_tokens});
    std::string received;
    absl::StatusOr<ChatTurn> turn = chat_.Send(text, [&](absl::string_view piece) {
      if (!received.empty()) received += "|";
      received += std::string(piece);
    });
    EXPECT_TRUE(turn.ok()) << turn.status();
    return received;
  }

  FakeChatRpcs rpcs_;
  ChatSession chat_{&rpcs_, Options()};
};

TEST_F(ChatSessionTest, OpenCreatesTheSessionAndStartsWithTheSystemMessage) {
  EXPECT_EQ(chat_.session_id(), "");
  EXPECT_THAT(Lines(chat_.messages()), ElementsAre("system: Be brief."));
  absl::StatusOr<v1::Session> session = chat_.Open();
  ASSERT_TRUE(session.ok()) << session.status();
  EXPECT_EQ(session->id(), "s1");
  EXPECT_EQ(chat_.session_id(), "s1");
  ASSERT_EQ(rpcs_.creates.size(), 1u);
  EXPECT_EQ(rpcs_.creates[0].options().prefix(), "sys");
  EXPECT_EQ(rpcs_.creates[0].options().ttl_seconds(), 60);
  EXPECT_THAT(Lines(chat_.messages()), ElementsAre("system: Be brief."));
  EXPECT_EQ(chat_.num_turns(), 0);
  EXPECT_EQ(chat_.history_tokens(), 4);  // the prefix's, as the new session counts them

  EXPECT_EQ(chat_.Open().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(rpcs_.creates.size(), 1u);
}

TEST_F(ChatSessionTest, EachTurnSendsTheWholeConversation) {
  ASSERT_TRUE(chat_.Open().ok());
  EXPECT_EQ(Turn("Hi", "Hello", 20, 5), "H|ello");
  ASSERT_EQ(rpcs_.generates.size(), 1u);
  const v1::GenerateRequest& first = rpcs_.generates[0];
  EXPECT_THAT(Lines(first.messages()), ElementsAre("system: Be brief.", "user: Hi"));
  EXPECT_EQ(first.session(), "s1");
  EXPECT_EQ(first.prefix(), "");  // the session's options carry it
  EXPECT_FALSE(first.has_cache());
  EXPECT_EQ(first.sampling().max_new_tokens(), 8);
  EXPECT_EQ(first.template_kwargs(), R"({"enable_thinking":false})");
  EXPECT_THAT(Lines(chat_.messages()),
              ElementsAre("system: Be brief.", "user: Hi", "assistant: Hello"));
  EXPECT_EQ(chat_.num_turns(), 1);
  EXPECT_EQ(chat_.history_tokens(), 25);

  rpcs_.turns.push_back({.pieces = {"Sure", "."},
                         .prompt_tokens = 40,
                         .cached_tokens = 24,
                         .completion_tokens = 7,
                         .ttft_ms = 1.5,
                         .recompute_reason = "the cache was evicted"});
  absl::StatusOr<ChatTurn> second = chat_.Send("More", [](absl::string_view) {});
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->number, 2);
  EXPECT_EQ(second->text, "Sure.");
  EXPECT_EQ(second->finish_reason, v1::FINISH_REASON_EOS);
  EXPECT_EQ(second->usage.prompt_tokens(), 40);
  EXPECT_EQ(second->usage.cached_tokens(), 24);
  EXPECT_EQ(second->usage.completion_tokens(), 7);
  EXPECT_EQ(second->timings.ttft_ms(), 1.5);
  EXPECT_EQ(second->cache_report.session_recompute_reason(), "the cache was evicted");
  EXPECT_THAT(Lines(rpcs_.generates[1].messages()),
              ElementsAre("system: Be brief.", "user: Hi", "assistant: Hello", "user: More"));
  EXPECT_THAT(Lines(chat_.messages()),
              ElementsAre("system: Be brief.", "user: Hi", "assistant: Hello", "user: More",
                          "assistant: Sure."));
  EXPECT_EQ(chat_.history_tokens(), 47);
}

TEST(ChatSessionOptionsTest, NoSystemMessageNoSamplingNoKwargs) {
  FakeChatRpcs rpcs;
  ChatSession chat(&rpcs, ChatOptions());
  ASSERT_TRUE(chat.Open().ok());
  EXPECT_EQ(chat.messages().messages_size(), 0);
  EXPECT_FALSE(rpcs.creates[0].has_options());
  rpcs.turns.push_back({.pieces = {"Yo"}, .prompt_tokens = 3, .completion_tokens = 1});
  ASSERT_TRUE(chat.Send("Hi", [](absl::string_view) {}).ok());
  const v1::GenerateRequest& sent = rpcs.generates[0];
  EXPECT_THAT(Lines(sent.messages()), ElementsAre("user: Hi"));
  EXPECT_FALSE(sent.has_sampling());
  EXPECT_EQ(sent.template_kwargs(), "");
  EXPECT_EQ(chat.history_tokens(), 4);
}

TEST_F(ChatSessionTest, FailedTurnChangesNothing) {
  ASSERT_TRUE(chat_.Open().ok());
  Turn("Hi", "Hello", 20, 5);
  rpcs_.turns.push_back(
      {.pieces = {"Par"}, .error = absl::FailedPreconditionError("a turn is running")});
  std::string received;
  absl::StatusOr<ChatTurn> failed =
      chat_.Send("More", [&](absl::string_view piece) { received += std::string(piece); });
  EXPECT_EQ(failed.status(), absl::FailedPreconditionError("a turn is running"));
  EXPECT_EQ(received, "Par");  // streamed before the failure
  EXPECT_THAT(Lines(chat_.messages()),
              ElementsAre("system: Be brief.", "user: Hi", "assistant: Hello"));
  EXPECT_EQ(chat_.num_turns(), 1);
  EXPECT_EQ(chat_.history_tokens(), 25);

  // A stream that ends without its last message is a failure too.
  rpcs_.turns.push_back({.pieces = {"x"}, .send_last = false});
  EXPECT_EQ(chat_.Send("More", [](absl::string_view) {}).status().code(),
            absl::StatusCode::kInternal);
  EXPECT_EQ(chat_.num_turns(), 1);

  // The next turn sends the conversation as it was, with the new message.
  Turn("Again", "Ok", 30, 2);
  EXPECT_THAT(Lines(rpcs_.generates.back().messages()),
              ElementsAre("system: Be brief.", "user: Hi", "assistant: Hello", "user: Again"));
  EXPECT_EQ(chat_.num_turns(), 2);
}

TEST_F(ChatSessionTest, SendWithoutASessionIsRefused) {
  EXPECT_EQ(chat_.Send("Hi", [](absl::string_view) {}).status(),
            absl::FailedPreconditionError("no session is open"));
  EXPECT_TRUE(rpcs_.generates.empty());
}

TEST_F(ChatSessionTest, RollbackDropsTheTokensTheTurnsAdded) {
  ASSERT_TRUE(chat_.Open().ok());  // 4 tokens (the prefix)
  Turn("One", "A1", 20, 5);        // history 25
  Turn("Two", "A2", 40, 7);        // history 47
  Turn("Three", "A3", 60, 3);      // history 63

  absl::StatusOr<ChatRollback> one = chat_.Rollback(1);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_THAT(rpcs_.rollbacks, ElementsAre(Pair("s1", 63 - 47)));
  EXPECT_EQ(one->turns, 1);
  EXPECT_EQ(one->tokens, 16);
  ASSERT_TRUE(one->session.has_value());
  EXPECT_EQ(one->session->num_tokens(), 47);
  EXPECT_EQ(chat_.num_turns(), 2);
  EXPECT_EQ(chat_.history_tokens(), 47);
  EXPECT_THAT(Lines(chat_.messages()), ElementsAre("system: Be brief.", "user: One",
                                                   "assistant: A1", "user: Two", "assistant: A2"));

  // Every remaining turn, down to the session's tokens when it was opened (its prefix's).
  absl::StatusOr<ChatRollback> two = chat_.Rollback(2);
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_THAT(rpcs_.rollbacks, ElementsAre(Pair("s1", 16), Pair("s1", 47 - 4)));
  EXPECT_EQ(two->tokens, 43);
  EXPECT_EQ(two->session->num_tokens(), 4);
  EXPECT_EQ(chat_.num_turns(), 0);
  EXPECT_EQ(chat_.history_tokens(), 4);
  EXPECT_THAT(Lines(chat_.messages()), ElementsAre("system: Be brief."));

  // The conversation goes on from there.
  Turn("Four", "A4", 18, 2);
  EXPECT_THAT(Lines(rpcs_.generates.back().messages()),
              ElementsAre("system: Be brief.", "user: Four"));
  EXPECT_EQ(chat_.num_turns(), 1);
}

TEST_F(ChatSessionTest, RollbackOfTurnsThatAddedNoTokensSkipsTheCall) {
  ASSERT_TRUE(chat_.Open().ok());
  Turn("One", "A1", 25, 5);  // history 30
  // A template that drops earlier reasoning can make the next prompt shorter than the history.
  Turn("Two", "A2", 25, 3);  // history 28
  absl::StatusOr<ChatRollback> rollback = chat_.Rollback(1);
  ASSERT_TRUE(rollback.ok()) << rollback.status();
  EXPECT_TRUE(rpcs_.rollbacks.empty());
  EXPECT_EQ(rollback->turns, 1);
  EXPECT_EQ(rollback->tokens, 0);
  EXPECT_FALSE(rollback->session.has_value());
  EXPECT_EQ(chat_.num_turns(), 1);
  EXPECT_EQ(chat_.history_tokens(), 30);
}

TEST_F(ChatSessionTest, RollbackRefusesTurnsOutOfRangeWithoutCalling) {
  ASSERT_TRUE(chat_.Open().ok());
  EXPECT_EQ(chat_.Rollback(1).status(),
            absl::InvalidArgumentError("there is no turn to roll back"));
  Turn("One", "A1", 20, 5);
  Turn("Two", "A2", 40, 7);
  EXPECT_EQ(chat_.Rollback(3).status(),
            absl::InvalidArgumentError("cannot roll back 3 turns: the conversation has 2"));
  EXPECT_EQ(chat_.Rollback(0).status(),
            absl::InvalidArgumentError("the number of turns to roll back must be >= 1; got 0"));
  EXPECT_EQ(chat_.Rollback(-1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(rpcs_.rollbacks.empty());
  EXPECT_EQ(chat_.num_turns(), 2);
}

TEST_F(ChatSessionTest, RollbackErrorChangesNothing) {
  ASSERT_TRUE(chat_.Open().ok());
  Turn("One", "A1", 20, 5);
  rpcs_.rollback_errors.push_back(absl::FailedPreconditionError("a turn is running"));
  EXPECT_EQ(chat_.Rollback(1).status(), absl::FailedPreconditionError("a turn is running"));
  EXPECT_EQ(chat_.num_turns(), 1);
  EXPECT_EQ(chat_.history_tokens(), 25);
  EXPECT_EQ(chat_.messages().messages_size(), 3);
  // Tried again, the same tokens.
  ASSERT_TRUE(chat_.Rollback(1).ok());
  EXPECT_THAT(rpcs_.rollbacks, ElementsAre(Pair("s1", 21), Pair("s1", 21)));
}

TEST_F(ChatSessionTest, ResetClosesAndOpensAnotherSessionKeepingTheSystemMessage) {
  ASSERT_TRUE(chat_.Open().ok());
  Turn("One", "A1", 20, 5);
  absl::StatusOr<v1::Session> session = chat_.Reset();
  ASSERT_TRUE(session.ok()) << session.status();
  EXPECT_EQ(session->id(), "s2");
  EXPECT_THAT(rpcs_.closes, ElementsAre("s1"));
  ASSERT_EQ(rpcs_.creates.size(), 2u);
  EXPECT_EQ(rpcs_.creates[1].SerializeAsString(), rpcs_.creates[0].SerializeAsString());
  EXPECT_EQ(chat_.session_id(), "s2");
  EXPECT_THAT(Lines(chat_.messages()), ElementsAre("system: Be brief."));
  EXPECT_EQ(chat_.num_turns(), 0);
  EXPECT_EQ(chat_.history_tokens(), 4);

  Turn("Two", "A2", 18, 2);
  EXPECT_EQ(rpcs_.generates.back().session(), "s2");
  EXPECT_THAT(Lines(rpcs_.generates.back().messages()),
              ElementsAre("system: Be brief.", "user: Two"));
}

TEST_F(ChatSessionTest, ResetOfAnExpiredSessionOpensAnother) {
  ASSERT_TRUE(chat_.Open().ok());
  rpcs_.close_errors.push_back(absl::NotFoundError("session 's1' is not open"));
  absl::StatusOr<v1::Session> session = chat_.Reset();
  ASSERT_TRUE(session.ok()) << session.status();
  EXPECT_EQ(session->id(), "s2");
}

TEST_F(ChatSessionTest, ResetWhoseCloseFailsChangesNothing) {
  ASSERT_TRUE(chat_.Open().ok());
  Turn("One", "A1", 20, 5);
  rpcs_.close_errors.push_back(absl::DeadlineExceededError("deadline"));
  EXPECT_EQ(chat_.Reset().status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(rpcs_.creates.size(), 1u);
  EXPECT_EQ(chat_.session_id(), "s1");
  EXPECT_EQ(chat_.num_turns(), 1);
  EXPECT_EQ(chat_.messages().messages_size(), 3);
}

TEST_F(ChatSessionTest, ResetWhoseCreateFailsLeavesNoSessionUntilTheNextReset) {
  ASSERT_TRUE(chat_.Open().ok());
  Turn("One", "A1", 20, 5);
  rpcs_.create_errors.push_back(absl::ResourceExhaustedError("64 sessions are open"));
  EXPECT_EQ(chat_.Reset().status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(chat_.session_id(), "");
  EXPECT_EQ(chat_.num_turns(), 0);
  EXPECT_EQ(chat_.history_tokens(), 0);
  EXPECT_THAT(Lines(chat_.messages()), ElementsAre("system: Be brief."));
  EXPECT_EQ(chat_.Send("Hi", [](absl::string_view) {}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(chat_.Rollback(1).status().code(), absl::StatusCode::kInvalidArgument);

  absl::StatusOr<v1::Session> session = chat_.Reset();  // nothing to close
  ASSERT_TRUE(session.ok()) << session.status();
  EXPECT_EQ(session->id(), "s2");
  EXPECT_THAT(rpcs_.closes, ElementsAre("s1"));
}

TEST_F(ChatSessionTest, CloseForgetsTheSessionEvenWhenItFails) {
  EXPECT_TRUE(chat_.Close().ok());  // none open: no call
  EXPECT_TRUE(rpcs_.closes.empty());
  ASSERT_TRUE(chat_.Open().ok());
  Turn("One", "A1", 20, 5);
  rpcs_.close_errors.push_back(absl::NotFoundError("session 's1' is not open"));
  EXPECT_EQ(chat_.Close().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(rpcs_.closes, ElementsAre("s1"));
  EXPECT_EQ(chat_.session_id(), "");
  EXPECT_EQ(chat_.num_turns(), 0);
  EXPECT_TRUE(chat_.Close().ok());
  EXPECT_THAT(rpcs_.closes, ElementsAre("s1"));
}

}  // namespace
}  // namespace kvserve::client
