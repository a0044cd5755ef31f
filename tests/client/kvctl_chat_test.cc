// Tests of kvctl chat: its flags onto ChatOptions (refusals naming the flag), the line loop
// against a scripted ChatRpcs (what it prints, the commands, errors that do and do not end it),
// and the whole command against the fake server.
#include "client/kvctl_chat.h"

#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "fake_chat_rpcs.h"
#include "fake_generation_service.h"

namespace kvserve::client {
namespace {

using ::testing::Each;
using ::testing::ElementsAre;
using testing::FakeChatRpcs;
using testing::FakeServer;
using ::testing::HasSubstr;
using ::testing::Pair;
using ::testing::StartsWith;

absl::StatusOr<ChatOptions> Build(const std::vector<std::string>& args) {
  absl::StatusOr<ParsedFlags> parsed = ParseFlags(args, ChatFlagSpecs(), ChatRepeatableFlags());
  if (!parsed.ok()) return parsed.status();
  return BuildChatOptions(*parsed);
}

TEST(BuildChatOptionsTest, NoFlagsLeaveEverythingUnset) {
  absl::StatusOr<ChatOptions> options = Build({});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_FALSE(options->create.has_options());
  EXPECT_EQ(options->system, "");
  EXPECT_FALSE(options->sampling.has_value());
  EXPECT_EQ(options->template_kwargs, "");
}

TEST(BuildChatOptionsTest, EveryFlag) {
  absl::StatusOr<ChatOptions> options = Build(
      {"--system", "Be brief.", "--prefix", "sys", "--ttl-seconds", "120", "--cache-implementation",
       "quantized", "--cache-config", R"({"nbits":2})", "--max-new-tokens", "8", "--temperature",
       "0", "--stop", "\n", "--stop=END", "--template-kwargs", R"({"b":1,"a":{"c":[true]}})"});
  ASSERT_TRUE(options.ok()) << options.status();
  const v1::SessionOptions& session = options->create.options();
  EXPECT_EQ(session.prefix(), "sys");
  EXPECT_EQ(session.ttl_seconds(), 120);
  EXPECT_EQ(session.cache().cache_implementation(), "quantized");
  EXPECT_EQ(session.cache().quantization().nbits(), 2);
  EXPECT_FALSE(session.cache().has_use_cache());
  EXPECT_FALSE(session.cache().skip_prefix_reuse());
  EXPECT_EQ(options->system, "Be brief.");
  ASSERT_TRUE(options->sampling.has_value());
  EXPECT_EQ(options->sampling->max_new_tokens(), 8);
  EXPECT_TRUE(options->sampling->has_temperature());
  EXPECT_EQ(options->sampling->temperature(), 0.0f);
  EXPECT_FALSE(options->sampling->has_top_k());
  EXPECT_THAT(options->sampling->stop(), ElementsAre("\n", "END"));
  // As given, keys in their order.
  EXPECT_EQ(options->template_kwargs, R"({"b":1,"a":{"c":[true]}})");
}

TEST(BuildChatOptionsTest, MalformedValuesNameTheFlag) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--ttl-seconds", "soon"}, "--ttl-seconds: 'soon' is not an integer"},
      {{"--max-cache-len", "many"}, "--max-cache-len: 'many' is not an integer"},
      {{"--cache-config", R"({"bits":4})"}, "--cache-config: unknown key \"bits\""},
      {{"--offload-only-non-sliding=yes"}, "--offload-only-non-sliding takes no value, or =true"},
      {{"--max-new-tokens", "x"}, "--max-new-tokens: 'x' is not a 32-bit integer"},
      {{"--template-kwargs", "[1]"}, "--template-kwargs: expected a JSON object"},
      {{"--template-kwargs", "{"}, "--template-kwargs: not valid JSON"},
      // Not a session's: the flags generate has for a request's own cache and input.
      {{"--no-cache"}, "--no-cache"},
      {{"--no-prefix-reuse"}, "--no-prefix-reuse"},
      {{"--messages", "[]"}, "--messages"},
  };
  for (const auto& [args, message] : cases) {
    absl::StatusOr<ChatOptions> options = Build(args);
    ASSERT_FALSE(options.ok()) << message;
    EXPECT_EQ(options.status().code(), absl::StatusCode::kInvalidArgument) << message;
    EXPECT_THAT(options.status().message(), HasSubstr(message));
  }
}

// Runs the loop on `input` with a scripted ChatRpcs, keeping what it prints.
class ChatLoopTest : public ::testing::Test {
 protected:
  ChatLoopTest() {
    options_.system = "Be brief.";
    rpcs_.session_tokens = 4;
  }

  int Run(const std::string& input, bool interactive = false) {
    std::istringstream in(input);
    ChatSession chat(&rpcs_, options_);
    return RunChatLoop(chat, in, out_, err_, interactive);
  }

  void Script(std::vector<std::string> pieces, int32_t prompt_tokens, int32_t cached_tokens,
              int32_t completion_tokens, double ttft_ms = 1.25) {
    rpcs_.turns.push_back({.pieces = std::move(pieces),
                           .prompt_tokens = prompt_tokens,
                           .cached_tokens = cached_tokens,
                           .completion_tokens = completion_tokens,
                           .ttft_ms = ttft_ms});
  }

  ChatOptions options_;
  FakeChatRpcs rpcs_;
  std::ostringstream out_;
  std::ostringstream err_;
};

TEST_F(ChatLoopTest, PipedConversationWithRollbackAndReset) {
  Script({"Hel", "lo"}, 20, 0, 5);
  Script({"Sure."}, 40, 24, 7, 12.34);
  Script({"Again."}, 40, 25, 3);
  Script({"New."}, 18, 4, 2);
  ASSERT_EQ(Run("Hi\n"
                "\n"
                "More\n"
                "/rollback\n"
                "Other\n"
                "  \t\n"
                "/reset\n"
                "Fresh\r\n"),
            kExitOk);
  EXPECT_EQ(out_.str(), "Hello\nSure.\nAgain.\nNew.\n");
  EXPECT_EQ(err_.str(),
            "[session s1]\n"
            "[turn 1: 20 prompt tokens, 0 cached, ttft 1.2 ms, 5 new tokens]\n"
            "[turn 2: 40 prompt tokens, 24 cached, ttft 12.3 ms, 7 new tokens]\n"
            "[rolled back 1 turn: 22 tokens dropped, the session holds 25 tokens]\n"
            "[turn 2: 40 prompt tokens, 25 cached, ttft 1.2 ms, 3 new tokens]\n"
            "[reset: session s2]\n"
            "[turn 1: 18 prompt tokens, 4 cached, ttft 1.2 ms, 2 new tokens]\n"
            "[session s2 closed]\n");
  ASSERT_EQ(rpcs_.generates.size(), 4u);
  // After the rollback, "More" and its answer are gone from what the next turn sends.
  const v1::ChatMessages& other = rpcs_.generates[2].messages();
  ASSERT_EQ(other.messages_size(), 4);
  EXPECT_EQ(other.messages(2).content(), "Hello");
  EXPECT_EQ(other.messages(3).content(), "Other");
  // After the reset, only the system message and the new one; the '\r' is dropped.
  const v1::ChatMessages& fresh = rpcs_.generates[3].messages();
  ASSERT_EQ(fresh.messages_size(), 2);
  EXPECT_EQ(fresh.messages(0).content(), "Be brief.");
  EXPECT_EQ(fresh.messages(1).content(), "Fresh");
  EXPECT_EQ(rpcs_.generates[3].session(), "s2");
  EXPECT_THAT(rpcs_.rollbacks, ElementsAre(Pair("s1", 47 - 25)));
  EXPECT_THAT(rpcs_.closes, ElementsAre("s1", "s2"));
}

TEST_F(ChatLoopTest, InteractivePromptsOnStderr) {
  Script({"Hello"}, 20, 0, 5);
  ASSERT_EQ(Run("Hi\n", /*interactive=*/true), kExitOk);
  EXPECT_EQ(out_.str(), "Hello\n");
  EXPECT_EQ(err_.str(),
            "[session s1]\n"
            "> [turn 1: 20 prompt tokens, 0 cached, ttft 1.2 ms, 5 new tokens]\n"
            "> \n"
            "[session s1 closed]\n");
}

TEST_F(ChatLoopTest, RecomputeReasonIsShown) {
  rpcs_.turns.push_back({.pieces = {"Hi"},
                         .prompt_tokens = 9,
                         .completion_tokens = 1,
                         .recompute_reason = "the cache was evicted"});
  ASSERT_EQ(Run("Hi\n"), kExitOk);
  EXPECT_THAT(err_.str(), HasSubstr("[turn 1: 9 prompt tokens, 0 cached, ttft 0.0 ms, 1 new "
                                    "tokens, recomputed: the cache was evicted]\n"));
}

TEST_F(ChatLoopTest, QuitStopsReading) {
  Script({"Hello"}, 20, 0, 5);
  ASSERT_EQ(Run("Hi\n/quit\nNot sent\n"), kExitOk);
  EXPECT_EQ(rpcs_.generates.size(), 1u);
  EXPECT_THAT(rpcs_.closes, ElementsAre("s1"));
  EXPECT_THAT(err_.str(), HasSubstr("[session s1 closed]\n"));
  rpcs_.generates.clear();
  ASSERT_EQ(Run("/exit\nNot sent\n"), kExitOk);
  EXPECT_TRUE(rpcs_.generates.empty());
}

TEST_F(ChatLoopTest, ErrorsArePrintedAndTheChatGoesOn) {
  rpcs_.turns.push_back(
      {.pieces = {}, .error = absl::FailedPreconditionError("a turn is running on session s1")});
  rpcs_.turns.push_back({.pieces = {"Par"}, .error = absl::NotFoundError("session s1 expired")});
  Script({"Fine."}, 20, 0, 5);
  ASSERT_EQ(Run("One\nTwo\n/rollback x\n/rollback 1 2\n/rollback 2\n/nope\nThree\n"), kExitOk);
  // The cut-off answer still ends its line.
  EXPECT_EQ(out_.str(), "Par\nFine.\n");
  EXPECT_EQ(err_.str(),
            "[session s1]\n"
            "kvctl: FAILED_PRECONDITION: a turn is running on session s1\n"
            "kvctl: NOT_FOUND: session s1 expired\n"
            "kvctl: INVALID_ARGUMENT: usage: /rollback [N], N a number of turns\n"
            "kvctl: INVALID_ARGUMENT: usage: /rollback [N], N a number of turns\n"
            "kvctl: INVALID_ARGUMENT: there is no turn to roll back\n"
            "kvctl chat: unknown command '/nope' (/help lists them)\n"
            "[turn 1: 20 prompt tokens, 0 cached, ttft 1.2 ms, 5 new tokens]\n"
            "[session s1 closed]\n");
  // The failed turns left the conversation as it was.
  EXPECT_EQ(rpcs_.generates.back().messages().messages_size(), 2);
  EXPECT_TRUE(rpcs_.rollbacks.empty());
}

TEST_F(ChatLoopTest, RollbackOfTurnsThatAddedNoTokens) {
  Script({"A"}, 25, 0, 5);
  Script({"B"}, 25, 20, 3);
  ASSERT_EQ(Run("One\nTwo\n/rollback\n"), kExitOk);
  EXPECT_THAT(err_.str(), HasSubstr("[rolled back 1 turn: no tokens to drop]\n"));
  EXPECT_TRUE(rpcs_.rollbacks.empty());
}

TEST_F(ChatLoopTest, RollbackOfSeveralTurns) {
  Script({"A"}, 20, 0, 5);
  Script({"B"}, 40, 25, 7);
  ASSERT_EQ(Run("One\nTwo\n/rollback 2\n"), kExitOk);
  EXPECT_THAT(err_.str(),
              HasSubstr("[rolled back 2 turns: 43 tokens dropped, the session holds 4 tokens]\n"));
  EXPECT_THAT(rpcs_.rollbacks, ElementsAre(Pair("s1", 43)));
}

TEST_F(ChatLoopTest, HelpListsTheCommands) {
  ASSERT_EQ(Run("/help\n"), kExitOk);
  EXPECT_EQ(err_.str(), "[session s1]\n" + ChatCommandsHelp() + "[session s1 closed]\n");
  EXPECT_THAT(ChatCommandsHelp(), HasSubstr("/rollback [N]"));
  EXPECT_THAT(ChatCommandsHelp(), HasSubstr("/reset"));
  EXPECT_THAT(ChatCommandsHelp(), HasSubstr("/quit"));
}

TEST_F(ChatLoopTest, LostConnectionEndsTheChat) {
  Script({"Hello"}, 20, 0, 5);
  rpcs_.turns.push_back({.pieces = {}, .error = absl::UnavailableError("Connection refused")});
  EXPECT_EQ(Run("Hi\nMore\nNot sent\n"), kExitRpcError);
  EXPECT_EQ(rpcs_.generates.size(), 2u);
  EXPECT_TRUE(rpcs_.closes.empty());  // no server to close it on; it expires
  EXPECT_THAT(err_.str(), ::testing::EndsWith("kvctl: UNAVAILABLE: Connection refused\n"));
}

TEST_F(ChatLoopTest, LostConnectionOnResetEndsTheChat) {
  rpcs_.close_errors.push_back(absl::UnavailableError("Connection refused"));
  EXPECT_EQ(Run("/reset\nNot sent\n"), kExitRpcError);
  EXPECT_TRUE(rpcs_.generates.empty());
}

TEST_F(ChatLoopTest, FailedResetLeavesNoSessionUntilTheNextOne) {
  rpcs_.create_errors.push_back(absl::OkStatus());  // the first session opens
  rpcs_.create_errors.push_back(absl::ResourceExhaustedError("64 sessions are open"));
  Script({"Hello"}, 20, 0, 5);
  ASSERT_EQ(Run("/reset\nHi\n/reset\nHi\n"), kExitOk);
  EXPECT_EQ(err_.str(),
            "[session s1]\n"
            "kvctl: RESOURCE_EXHAUSTED: 64 sessions are open\n"
            "kvctl: FAILED_PRECONDITION: no session is open\n"
            "[reset: session s2]\n"
            "[turn 1: 20 prompt tokens, 0 cached, ttft 1.2 ms, 5 new tokens]\n"
            "[session s2 closed]\n");
}

TEST_F(ChatLoopTest, FailedResetThenEndOfInputClosesNothing) {
  rpcs_.create_errors.push_back(absl::OkStatus());
  rpcs_.create_errors.push_back(absl::ResourceExhaustedError("64 sessions are open"));
  ASSERT_EQ(Run("/reset\n"), kExitOk);
  EXPECT_THAT(rpcs_.closes, ElementsAre("s1"));  // by the reset
}

TEST_F(ChatLoopTest, FirstSessionFailingEndsBeforeReading) {
  rpcs_.create_errors.push_back(absl::NotFoundError("prefix 'sys' is not registered"));
  EXPECT_EQ(Run("Hi\n"), kExitRpcError);
  EXPECT_EQ(err_.str(), "kvctl: NOT_FOUND: prefix 'sys' is not registered\n");
  EXPECT_TRUE(rpcs_.generates.empty());
}

TEST_F(ChatLoopTest, ExpiredSessionAtTheEndIsNotAnError) {
  rpcs_.close_errors.push_back(absl::NotFoundError("session 's1' is not open"));
  EXPECT_EQ(Run(""), kExitOk);
  EXPECT_EQ(err_.str(), "[session s1]\n");
}

TEST_F(ChatLoopTest, OtherCloseErrorAtTheEndIsAnRpcError) {
  rpcs_.close_errors.push_back(absl::DeadlineExceededError("Deadline Exceeded"));
  EXPECT_EQ(Run(""), kExitRpcError);
  EXPECT_EQ(err_.str(), "[session s1]\nkvctl: DEADLINE_EXCEEDED: Deadline Exceeded\n");
}

// The whole command against the fake server.
class ChatCommandTest : public ::testing::Test {
 protected:
  int Run(const std::vector<std::string>& args, const std::string& input, bool json = false) {
    out_.str("");
    err_.str("");
    std::vector<base::FlagSpec> specs = GlobalFlagSpecs();
    for (const base::FlagSpec& spec : ChatFlagSpecs()) specs.push_back(spec);
    std::vector<std::string> all = {"--target", server_.target(), "--timeout-ms", "10000"};
    all.insert(all.end(), args.begin(), args.end());
    absl::StatusOr<ParsedFlags> flags = ParseFlags(all, specs, ChatRepeatableFlags());
    EXPECT_TRUE(flags.ok()) << flags.status();
    if (!flags.ok()) return -1;
    absl::StatusOr<Globals> globals = ParseGlobals(*flags);
    EXPECT_TRUE(globals.ok()) << globals.status();
    if (!globals.ok()) return -1;
    globals->json = json;
    std::istringstream in(input);
    return RunChat(*globals, *flags, in, out_, err_, /*interactive=*/false);
  }

  FakeServer server_;
  std::ostringstream out_;
  std::ostringstream err_;
};

TEST_F(ChatCommandTest, PipedConversation) {
  ASSERT_EQ(Run({"--system", "Be brief.", "--max-new-tokens", "2"}, "Hi\nThere\n/rollback\n"),
            kExitOk)
      << err_.str();
  EXPECT_EQ(out_.str(), "t0t1\nt0t1\n");
  // The fake counts a message's bytes plus one: turn 1 is 10 + 3, turn 2 adds the answer (5)
  // and "There" (6), its history 15 cached.
  EXPECT_EQ(err_.str(),
            "[session 00000000000000000000000000000001]\n"
            "[turn 1: 13 prompt tokens, 0 cached, ttft 0.0 ms, 2 new tokens]\n"
            "[turn 2: 24 prompt tokens, 15 cached, ttft 0.0 ms, 2 new tokens]\n"
            "[rolled back 1 turn: 11 tokens dropped, the session holds 15 tokens]\n"
            "[session 00000000000000000000000000000001 closed]\n");
  // Every call carried one routing key, a random one without --route and --prefix.
  const std::vector<std::string> routes = server_.replica().routes();
  ASSERT_EQ(routes.size(), 5u);  // create, 2 turns, rollback, close
  EXPECT_THAT(routes[0], StartsWith("chat-"));
  EXPECT_EQ(routes[0].size(), 5u + 16u);
  EXPECT_THAT(routes, Each(routes[0]));
}

TEST_F(ChatCommandTest, SessionOptionsAndRoutes) {
  ASSERT_EQ(
      Run({"--prefix", "sys", "--ttl-seconds", "30", "--cache-implementation", "static"}, "Hi\n"),
      kExitOk)
      << err_.str();
  const v1::CreateSessionRequest sent = server_.sessions().last_create_request();
  EXPECT_EQ(sent.options().prefix(), "sys");
  EXPECT_EQ(sent.options().ttl_seconds(), 30);
  EXPECT_EQ(sent.options().cache().cache_implementation(), "static");
  EXPECT_THAT(server_.replica().routes(), Each(std::string("sys")));

  ASSERT_EQ(Run({"--route", "conv-7"}, "Hi\n"), kExitOk) << err_.str();
  EXPECT_EQ(server_.replica().routes().back(), "conv-7");
}

TEST_F(ChatCommandTest, ServerErrorsOfTheFirstSessionAndBadFlags) {
  EXPECT_EQ(Run({"--prefix", "missing"}, "Hi\n"), kExitRpcError);
  EXPECT_EQ(err_.str(), "kvctl: NOT_FOUND: prefix 'missing' is not registered\n");
  EXPECT_EQ(Run({}, "Hi\n", /*json=*/true), kExitBadFlags);
  EXPECT_EQ(err_.str(), "kvctl chat: --output json is not supported (see kvctl chat --help)\n");
  EXPECT_EQ(Run({"--template-kwargs", "[]"}, "Hi\n"), kExitBadFlags);
  EXPECT_EQ(err_.str(),
            "kvctl chat: --template-kwargs: expected a JSON object (see kvctl chat --help)\n");
}

TEST(ChatCommandUnreachableTest, NoServerIsAnRpcError) {
  std::string target;
  {
    FakeServer gone;
    target = gone.target();
  }
  absl::StatusOr<ParsedFlags> flags = ParseFlags({}, ChatFlagSpecs());
  ASSERT_TRUE(flags.ok()) << flags.status();
  std::istringstream in("Hi\n");
  std::ostringstream out;
  std::ostringstream err;
  const Globals globals{.target = target, .call = {.timeout = absl::Seconds(10)}};
  EXPECT_EQ(RunChat(globals, *flags, in, out, err, false), kExitRpcError);
  EXPECT_EQ(out.str(), "");
  EXPECT_THAT(err.str(), ::testing::AnyOf(StartsWith("kvctl: UNAVAILABLE: "),
                                          StartsWith("kvctl: DEADLINE_EXCEEDED: ")));
}

TEST(ChatCommandTableTest, NameFlagsAndHelp) {
  const Command command = ChatCommand();
  EXPECT_EQ(command.name, "chat");
  EXPECT_NE(command.run, nullptr);
  EXPECT_THAT(command.repeatable, ElementsAre("stop"));
  EXPECT_TRUE(command.arguments.empty());
  EXPECT_THAT(command.details, HasSubstr(ChatCommandsHelp()));
  EXPECT_THAT(command.details, HasSubstr("[turn T: P prompt tokens, C cached, ttft X ms, N new "
                                         "tokens]"));
}

}  // namespace
}  // namespace kvserve::client
