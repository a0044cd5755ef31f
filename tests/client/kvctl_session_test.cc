// Tests of kvctl session: create's flags onto CreateSessionRequest (unset options staying
// unset, refusals naming the flag), the positional ID and N, and each subcommand against the
// fake server in text and JSON.
#include "client/kvctl_session.h"

#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "fake_generation_service.h"
#include "nlohmann/json.hpp"

namespace kvserve::client {
namespace kvctl_session_test {

using ::testing::ElementsAre;
using testing::FakeServer;
using ::testing::HasSubstr;

absl::StatusOr<v1::CreateSessionRequest> Build(const std::vector<std::string>& args) {
  absl::StatusOr<ParsedFlags> parsed = ParseFlags(args, SessionCreateFlagSpecs());
  if (!parsed.ok()) return parsed.status();
  return BuildCreateSessionRequest(*parsed);
}

absl::StatusOr<ParsedFlags> Arguments(const std::vector<std::string>& args,
                                      const std::vector<std::string>& names) {
  return ParseFlags(args, GlobalFlagSpecs(), {}, names);
}

TEST(BuildCreateSessionRequestTest, NoFlagsLeaveOptionsUnset) {
  absl::StatusOr<v1::CreateSessionRequest> request = Build({});
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_FALSE(request->has_options());
}

TEST(BuildCreateSessionRequestTest, EachFlagAloneSetsOnlyItself) {
  absl::StatusOr<v1::CreateSessionRequest> prefix = Build({"--prefix", "sys"});
  ASSERT_TRUE(prefix.ok()) << prefix.status();
  EXPECT_EQ(prefix->options().prefix(), "sys");
  EXPECT_FALSE(prefix->options().has_cache());
  EXPECT_EQ(prefix->options().ttl_seconds(), 0);

  absl::StatusOr<v1::CreateSessionRequest> ttl = Build({"--ttl-seconds", "90"});
  ASSERT_TRUE(ttl.ok()) << ttl.status();
  EXPECT_EQ(ttl->options().ttl_seconds(), 90);
  EXPECT_FALSE(ttl->options().has_cache());
  EXPECT_EQ(ttl->options().prefix(), "");

  absl::StatusOr<v1::CreateSessionRequest> cache = Build({"--max-cache-len", "512"});
  ASSERT_TRUE(cache.ok()) << cache.status();
  ASSERT_TRUE(cache->options().has_cache());
  EXPECT_TRUE(cache->options().cache().has_max_cache_len());
  EXPECT_EQ(cache->options().cache().max_cache_len(), 512);
  EXPECT_EQ(cache->options().cache().cache_implementation(), "");
  EXPECT_FALSE(cache->options().cache().has_use_cache());
  EXPECT_FALSE(cache->options().cache().has_quantization());
  EXPECT_FALSE(cache->options().cache().has_offload_only_non_sliding());
}

TEST(BuildCreateSessionRequestTest, EveryStrategyFlag) {
  absl::StatusOr<v1::CreateSessionRequest> request =
      Build({"--cache-implementation", "offloaded_static", "--cache-config",
             R"({"backend":"hqq","nbits":2})", "--max-cache-len", "1024",
             "--offload-only-non-sliding=false", "--prefix", "sys", "--ttl-seconds=0"});
  ASSERT_TRUE(request.ok()) << request.status();
  const v1::CacheOptions& cache = request->options().cache();
  EXPECT_EQ(cache.cache_implementation(), "offloaded_static");
  EXPECT_EQ(cache.quantization().backend(), "hqq");
  EXPECT_EQ(cache.quantization().nbits(), 2);
  EXPECT_EQ(cache.max_cache_len(), 1024);
  EXPECT_TRUE(cache.has_offload_only_non_sliding());
  EXPECT_FALSE(cache.offload_only_non_sliding());
  EXPECT_EQ(request->options().prefix(), "sys");
  EXPECT_EQ(request->options().ttl_seconds(), 0);
}

TEST(BuildCreateSessionRequestTest, MalformedValuesNameTheFlag) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--ttl-seconds", "soon"}, "--ttl-seconds: 'soon' is not an integer"},
      {{"--max-cache-len", "1.5"}, "--max-cache-len: '1.5' is not an integer"},
      {{"--cache-config", "nbits=2"}, "--cache-config: not valid JSON"},
      {{"--offload-only-non-sliding=1"}, "--offload-only-non-sliding takes no value, or =true"},
      // A session's cache is always used and reused: generate's switches are not flags here.
      {{"--no-cache"}, "--no-cache"},
      {{"--no-prefix-reuse"}, "--no-prefix-reuse"},
      {{"--name", "x"}, "--name"},
  };
  for (const auto& [args, message] : cases) {
    absl::StatusOr<v1::CreateSessionRequest> request = Build(args);
    ASSERT_FALSE(request.ok()) << message;
    EXPECT_EQ(request.status().code(), absl::StatusCode::kInvalidArgument) << message;
    EXPECT_THAT(request.status().message(), HasSubstr(message));
  }
}

TEST(SessionArgumentsTest, IdAndRollback) {
  absl::StatusOr<ParsedFlags> one = Arguments({"abc", "--target", "h:1"}, {"ID"});
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(*SessionIdArgument(*one), "abc");

  absl::StatusOr<ParsedFlags> two = Arguments({"--timeout-ms=5", "abc", "-3"}, {"ID", "N"});
  ASSERT_TRUE(two.ok()) << two.status();
  absl::StatusOr<RollbackArguments> rollback = ParseRollbackArguments(*two);
  ASSERT_TRUE(rollback.ok()) << rollback.status();
  EXPECT_EQ(rollback->id, "abc");
  EXPECT_EQ(rollback->n, -3);  // the server checks the range
}

TEST(SessionArgumentsTest, MissingOrMalformedArguments) {
  EXPECT_EQ(SessionIdArgument(*Arguments({}, {"ID"})).status(),
            absl::InvalidArgumentError("the session ID is required"));
  EXPECT_EQ(SessionIdArgument(*Arguments({""}, {"ID"})).status(),
            absl::InvalidArgumentError("the session ID is required"));
  const absl::Status missing = absl::InvalidArgumentError(
      "the session ID and N (the number of tokens to drop) are required");
  EXPECT_EQ(ParseRollbackArguments(*Arguments({}, {"ID", "N"})).status(), missing);
  EXPECT_EQ(ParseRollbackArguments(*Arguments({"abc"}, {"ID", "N"})).status(), missing);
  EXPECT_EQ(ParseRollbackArguments(*Arguments({"abc", "two"}, {"ID", "N"})).status(),
            absl::InvalidArgumentError("N: 'two' is not a 32-bit integer"));
  EXPECT_EQ(ParseRollbackArguments(*Arguments({"abc", "3000000000"}, {"ID", "N"})).status(),
            absl::InvalidArgumentError("N: '3000000000' is not a 32-bit integer"));
  // One argument too many.
  absl::StatusOr<ParsedFlags> extra = Arguments({"abc", "def"}, {"ID"});
  EXPECT_EQ(extra.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(extra.status().message(), HasSubstr("unexpected argument 'def'"));
}

TEST(SessionCommandGroupTest, CommandsAndTheirArguments) {
  const CommandGroup group = SessionCommandGroup();
  EXPECT_EQ(group.name, "session");
  std::vector<std::string> names;
  std::vector<std::vector<std::string>> arguments;
  for (const Command& command : group.commands) {
    names.push_back(command.name);
    arguments.push_back(command.arguments);
    EXPECT_NE(command.run, nullptr) << command.name;
  }
  EXPECT_THAT(names, ElementsAre("create", "get", "list", "close", "rollback"));
  EXPECT_THAT(arguments, ElementsAre(ElementsAre(), ElementsAre("ID"), ElementsAre(),
                                     ElementsAre("ID"), ElementsAre("ID", "N")));
}

// Runs the subcommands against a fake server, keeping what they print.
class SessionCommandTest : public ::testing::Test {
 protected:
  using RunBody = int (*)(const Globals&, const ParsedFlags&, std::ostream&, std::ostream&);

  int Run(RunBody body, const std::vector<base::FlagSpec>& specs,
          const std::vector<std::string>& args, const std::vector<std::string>& names, bool json) {
    out_.str("");
    err_.str("");
    absl::StatusOr<ParsedFlags> flags = ParseFlags(args, specs, {}, names);
    EXPECT_TRUE(flags.ok()) << flags.status();
    if (!flags.ok()) return -1;
    Globals globals{
        .target = server_.target(), .call = {.timeout = absl::Seconds(10)}, .json = json};
    return body(globals, *flags, out_, err_);
  }

  int Create(const std::vector<std::string>& args, bool json = false) {
    return Run(RunSessionCreate, SessionCreateFlagSpecs(), args, {}, json);
  }
  int Get(const std::vector<std::string>& args, bool json = false) {
    return Run(RunSessionGet, {}, args, {"ID"}, json);
  }
  int List(bool json = false) { return Run(RunSessionList, {}, {}, {}, json); }
  int Close(const std::vector<std::string>& args, bool json = false) {
    return Run(RunSessionClose, {}, args, {"ID"}, json);
  }
  int Rollback(const std::vector<std::string>& args, bool json = false) {
    return Run(RunSessionRollback, {}, args, {"ID", "N"}, json);
  }

  // Runs a turn of `tokens` token ids generating 3 on session `id`.
  void Turn(const std::string& id, int tokens) {
    v1::GenerateRequest request;
    for (int i = 0; i < tokens; ++i) request.mutable_token_ids()->add_ids(5);
    request.set_session(id);
    absl::StatusOr<v1::GenerateResponse> response =
        Client::Connect(server_.target())->Generate(request);
    ASSERT_TRUE(response.ok()) << response.status();
    EXPECT_EQ(response->cache_report().session(), id);
  }

  FakeServer server_;
  std::ostringstream out_;
  std::ostringstream err_;
};

constexpr char kFirst[] = "00000000000000000000000000000001";
constexpr char kSecond[] = "00000000000000000000000000000002";

TEST_F(SessionCommandTest, TextOutput) {
  ASSERT_EQ(List(), kExitOk);
  EXPECT_EQ(out_.str(), "no sessions\n");

  ASSERT_EQ(Create({"--ttl-seconds", "60", "--cache-implementation", "static"}), kExitOk)
      << err_.str();
  EXPECT_EQ(out_.str(),
            "id=00000000000000000000000000000001 state=empty num_tokens=0 cached_tokens=0 "
            "device_bytes=0 host_bytes=0 turns=0 evictions=0 cache=static prefix=- ttl=60s "
            "created_at=2023-11-14T22:13:20Z last_used_at=2023-11-14T22:13:20Z "
            "expires_at=2023-11-14T22:14:20Z\n");
  EXPECT_EQ(err_.str(), "");
  ASSERT_EQ(Create({"--prefix", "sys"}), kExitOk) << err_.str();

  Turn(kFirst, 5);  // 5 + 3 tokens
  ASSERT_EQ(Get({kFirst}), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(),
            "id=00000000000000000000000000000001 state=idle num_tokens=8 cached_tokens=8 "
            "device_bytes=0 host_bytes=0 turns=1 evictions=0 cache=static prefix=- ttl=60s "
            "created_at=2023-11-14T22:13:20Z last_used_at=2023-11-14T22:13:20Z "
            "expires_at=2023-11-14T22:14:20Z\n");

  ASSERT_EQ(List(), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(),
            "ID                                STATE  TOKENS  CACHED  DEVICE_BYTES  HOST_BYTES  "
            "TURNS  CACHE    PREFIX  EXPIRES_AT\n"
            "00000000000000000000000000000001  idle   8       8       0             0           "
            "1      static   -       2023-11-14T22:14:20Z\n"
            "00000000000000000000000000000002  empty  4       0       0             0           "
            "0      dynamic  sys     2023-11-14T22:23:21Z\n");

  ASSERT_EQ(Rollback({kFirst, "3"}), kExitOk) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("id=00000000000000000000000000000001 state=idle "
                                    "num_tokens=5 cached_tokens=5 "));

  ASSERT_EQ(Close({kFirst}), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), "closed 00000000000000000000000000000001\n");

  EXPECT_EQ(Get({kFirst}), kExitRpcError);
  EXPECT_EQ(out_.str(), "");
  EXPECT_EQ(err_.str(),
            "kvctl: NOT_FOUND: session '00000000000000000000000000000001' is not open\n");
  EXPECT_EQ(Close({kFirst}), kExitRpcError);
  EXPECT_EQ(Rollback({kFirst, "1"}), kExitRpcError);
  EXPECT_EQ(err_.str(),
            "kvctl: NOT_FOUND: session '00000000000000000000000000000001' is not open\n");
  // The prefix's tokens cannot be dropped.
  EXPECT_EQ(Rollback({kSecond, "1"}), kExitRpcError);
  EXPECT_EQ(err_.str(), "kvctl: INVALID_ARGUMENT: n: must be in [1, 0], got 1\n");
}

TEST_F(SessionCommandTest, JsonOutput) {
  ASSERT_EQ(Create({"--prefix", "sys"}, /*json=*/true), kExitOk) << err_.str();
  const nlohmann::json created = nlohmann::json::parse(out_.str());
  EXPECT_EQ(created["id"], kFirst);
  EXPECT_EQ(created["state"], "SESSION_STATE_EMPTY");
  EXPECT_EQ(created["numTokens"], 4);
  EXPECT_EQ(created["options"]["prefix"], "sys");
  EXPECT_EQ(created["options"]["cache"]["cacheImplementation"], "dynamic");
  EXPECT_EQ(created["options"]["ttlSeconds"], "600");  // int64 is a JSON string
  EXPECT_EQ(created["createdAt"], "2023-11-14T22:13:20Z");

  ASSERT_EQ(Get({kFirst}, /*json=*/true), kExitOk) << err_.str();
  EXPECT_EQ(nlohmann::json::parse(out_.str()), created);

  ASSERT_EQ(List(/*json=*/true), kExitOk) << err_.str();
  EXPECT_EQ(nlohmann::json::parse(out_.str()), nlohmann::json({{"sessions", {created}}}));

  Turn(kFirst, 2);
  ASSERT_EQ(Rollback({kFirst, "1"}, /*json=*/true), kExitOk) << err_.str();
  const nlohmann::json rolled_back = nlohmann::json::parse(out_.str());
  EXPECT_EQ(rolled_back["numTokens"], 4);
  EXPECT_EQ(rolled_back["turns"], "1");

  ASSERT_EQ(Close({kFirst}, /*json=*/true), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), "{}\n");
}

TEST_F(SessionCommandTest, CreateSendsOnlyTheFlagsGiven) {
  ASSERT_EQ(Create({}), kExitOk) << err_.str();
  EXPECT_FALSE(server_.sessions().last_create_request().has_options());
  ASSERT_EQ(Create({"--max-cache-len", "64"}), kExitOk) << err_.str();
  const v1::CreateSessionRequest sent = server_.sessions().last_create_request();
  EXPECT_EQ(sent.options().cache().max_cache_len(), 64);
  EXPECT_EQ(sent.options().cache().cache_implementation(), "");
  EXPECT_EQ(sent.options().ttl_seconds(), 0);
}

TEST_F(SessionCommandTest, BadFlagsExitTwoWithoutCalling) {
  EXPECT_EQ(Create({"--ttl-seconds", "x"}), kExitBadFlags);
  EXPECT_EQ(err_.str(),
            "kvctl session create: --ttl-seconds: 'x' is not an integer (see kvctl session "
            "create --help)\n");
  EXPECT_EQ(Get({}), kExitBadFlags);
  EXPECT_EQ(err_.str(),
            "kvctl session get: the session ID is required (see kvctl session get --help)\n");
  EXPECT_EQ(Close({}), kExitBadFlags);
  EXPECT_THAT(err_.str(), HasSubstr("kvctl session close: the session ID is required"));
  EXPECT_EQ(Rollback({kFirst}), kExitBadFlags);
  EXPECT_THAT(err_.str(), HasSubstr("kvctl session rollback: the session ID and N"));
  EXPECT_EQ(Rollback({kFirst, "x"}), kExitBadFlags);
  EXPECT_THAT(err_.str(), HasSubstr("kvctl session rollback: N: 'x' is not a 32-bit integer"));
  EXPECT_EQ(out_.str(), "");
  EXPECT_TRUE(server_.replica().routes().empty());  // nothing sent
}

TEST_F(SessionCommandTest, ServerErrorsExitOne) {
  EXPECT_EQ(Create({"--cache-implementation", "unknown"}), kExitRpcError);
  EXPECT_EQ(err_.str(),
            "kvctl: INVALID_ARGUMENT: options.cache.cache_implementation: unknown strategy\n");
  EXPECT_EQ(Create({"--prefix", "missing"}), kExitRpcError);
  EXPECT_EQ(err_.str(), "kvctl: NOT_FOUND: prefix 'missing' is not registered\n");
}

}  // namespace kvctl_session_test
}  // namespace kvserve::client
