// Tests of what every kvctl command shares: the global flags, above all the routing key's
// default (--route, else --prefix, else --name) and the API key's (--api-key, else
// $KVSERVE_API_KEY), and that a command sends them.
#include "client/kvctl_command.h"

#include <stdlib.h>

#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "client/kvctl_bench.h"
#include "client/kvctl_generate.h"
#include "client/kvctl_prefix.h"
#include "client/kvctl_session.h"
#include "client/request_flags.h"
#include "fake_generation_service.h"

namespace kvserve::client {
namespace {

using ::testing::ElementsAre;
using testing::FakeServer;
using ::testing::HasSubstr;
using ::testing::Not;

// Sets (or, with nullopt, unsets) an environment variable until destroyed, then restores it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = getenv(name); old != nullptr) old_ = old;
    Set(value);
  }
  ~ScopedEnv() { Set(old_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  void Set(const std::optional<std::string>& value) {
    if (value.has_value()) {
      setenv(name_, value->c_str(), /*overwrite=*/1);
    } else {
      unsetenv(name_);
    }
  }

  const char* const name_;
  std::optional<std::string> old_;
};

// Parses `args` against the global flags and `command_specs`, as kvctl does.
absl::StatusOr<Globals> Parse(const std::vector<std::string>& args,
                              const std::vector<base::FlagSpec>& command_specs) {
  std::vector<base::FlagSpec> specs = GlobalFlagSpecs();
  specs.insert(specs.end(), command_specs.begin(), command_specs.end());
  absl::StatusOr<ParsedFlags> flags = ParseFlags(args, specs, GenerateRepeatableFlags());
  if (!flags.ok()) return flags.status();
  return ParseGlobals(*flags);
}

TEST(ParseGlobalsTest, Defaults) {
  const ScopedEnv no_key(kApiKeyEnvironmentVariable, std::nullopt);
  absl::StatusOr<Globals> globals = Parse({}, {});
  ASSERT_TRUE(globals.ok()) << globals.status();
  EXPECT_EQ(globals->target, "127.0.0.1:50051");
  EXPECT_FALSE(globals->call.timeout.has_value());
  EXPECT_EQ(globals->call.route, "");
  EXPECT_FALSE(globals->json);
  EXPECT_EQ(globals->security.api_key, "");
}

TEST(ParseGlobalsTest, EveryFlag) {
  absl::StatusOr<Globals> globals = Parse(
      {"--target", "gw:8080", "--timeout-ms", "250", "--output", "json", "--route", "t1"}, {});
  ASSERT_TRUE(globals.ok()) << globals.status();
  EXPECT_EQ(globals->target, "gw:8080");
  EXPECT_EQ(globals->call.timeout, absl::Milliseconds(250));
  EXPECT_TRUE(globals->json);
  EXPECT_EQ(globals->call.route, "t1");
}

TEST(ParseGlobalsTest, BadValuesNameTheFlag) {
  EXPECT_THAT(Parse({"--output", "yaml"}, {}).status().message(), HasSubstr("--output"));
  EXPECT_THAT(Parse({"--timeout-ms", "0"}, {}).status().message(), HasSubstr("--timeout-ms"));
  EXPECT_THAT(Parse({"--timeout-ms", "x"}, {}).status().message(), HasSubstr("timeout-ms"));
}

TEST(ParseGlobalsTest, TargetsGrpcCanDial) {
  for (const std::string target :
       {"127.0.0.1:50051", "localhost:1", "kvserve.example:65535", "[::1]:50051",
        "[fe80::1%eth0]:8080", "unix:/run/kvserve.sock", "unix-abstract:kvserve",
        "dns:///kvserve.example:443", "ipv4:127.0.0.1:50051,127.0.0.2:50051"}) {
    absl::StatusOr<Globals> globals = Parse({"--target", target}, {});
    ASSERT_TRUE(globals.ok()) << target << ": " << globals.status();
    EXPECT_EQ(globals->target, target);
  }
}

// gRPC dials port 0 for a target without a port and resolves "http://..." as a host name; both
// fail only later, with errors that do not say why.
TEST(ParseGlobalsTest, TargetsGrpcWouldMisreadAreRefused) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"127.0.0.1", "no port (give HOST:PORT, e.g. 127.0.0.1:50051)"},
      {"kvserve.example", "no port (give HOST:PORT, e.g. 127.0.0.1:50051)"},
      {"http://127.0.0.1:50051", "give HOST:PORT, not a URL"},
      {"https://kvserve.example", "give HOST:PORT, not a URL"},
      {"127.0.0.1:0", "the port '0' is not a number in [1, 65535]"},
      {"127.0.0.1:65536", "the port '65536' is not a number in [1, 65535]"},
      {"127.0.0.1:", "the port '' is not a number in [1, 65535]"},
      {"127.0.0.1:+80", "the port '+80' is not a number in [1, 65535]"},
      {"127.0.0.1:http", "the port 'http' is not a number in [1, 65535]"},
      {":50051", "no host"},
      {"::1:50051", "an IPv6 address goes in brackets"},
      {"[::1]", "no port (give [IPV6]:PORT"},
      {"[::1:50051", "no ']'"},
      {"unix:", "no address after the scheme"},
      {"", "empty (give HOST:PORT"},
  };
  for (const auto& [target, why] : cases) {
    const absl::Status status = Parse({"--target", target}, {}).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << target;
    EXPECT_THAT(status.message(), HasSubstr(absl::StrCat("--target '", target, "': ", why)));
  }
}

TEST(ParseGlobalsTest, RouteDefaultsToThePrefixName) {
  const std::vector<base::FlagSpec> generate = GenerateFlagSpecs();
  EXPECT_EQ(Parse({"--prompt", "x", "--prefix", "support"}, generate)->call.route, "support");
  EXPECT_EQ(Parse({"--prompt", "x"}, generate)->call.route, "");
  // --route wins, and an empty one sends none.
  EXPECT_EQ(Parse({"--prefix", "support", "--route", "conv-42"}, generate)->call.route, "conv-42");
  EXPECT_EQ(Parse({"--prefix", "support", "--route="}, generate)->call.route, "");

  EXPECT_EQ(Parse({"--prefix", "sys"}, BenchFlagSpecs())->call.route, "sys");
  // prefix register/get/delete: the prefix's --name, so that registering a prefix reaches
  // the replica its requests reach.
  EXPECT_EQ(Parse({"--name", "sys", "--text", "x"}, PrefixRegisterFlagSpecs())->call.route, "sys");
  EXPECT_EQ(Parse({"--name", "sys"}, {{"name", "", ""}})->call.route, "sys");
  // session create: its --prefix, so that the session opens where the prefix is cached.
  EXPECT_EQ(Parse({"--prefix", "sys"}, SessionCreateFlagSpecs())->call.route, "sys");
  EXPECT_EQ(Parse({"--ttl-seconds", "5"}, SessionCreateFlagSpecs())->call.route, "");
}

TEST(ParseGlobalsTest, PrefixRegisterSendsItsNameAsTheRoute) {
  FakeServer server;
  std::vector<base::FlagSpec> specs = GlobalFlagSpecs();
  for (const base::FlagSpec& spec : PrefixRegisterFlagSpecs()) specs.push_back(spec);
  absl::StatusOr<ParsedFlags> flags = ParseFlags(
      {"--target", server.target(), "--timeout-ms", "10000", "--name", "sys", "--text", "Hi"},
      specs);
  ASSERT_TRUE(flags.ok()) << flags.status();
  absl::StatusOr<Globals> globals = ParseGlobals(*flags);
  ASSERT_TRUE(globals.ok()) << globals.status();
  std::ostringstream out;
  std::ostringstream err;
  ASSERT_EQ(RunPrefixRegister(*globals, *flags, out, err), kExitOk) << err.str();
  EXPECT_THAT(server.replica().routes(), ElementsAre("sys"));
}

TEST(ParseGlobalsTest, ApiKeyFromTheFlag) {
  const ScopedEnv no_key(kApiKeyEnvironmentVariable, std::nullopt);
  EXPECT_EQ(Parse({"--api-key", "k-flag"}, {})->security.api_key, "k-flag");
  EXPECT_EQ(Parse({"--api-key=k2"}, {})->security.api_key, "k2");
}

TEST(ParseGlobalsTest, ApiKeyFromTheEnvironment) {
  const ScopedEnv key(kApiKeyEnvironmentVariable, "k-env");
  EXPECT_EQ(Parse({}, {})->security.api_key, "k-env");
}

TEST(ParseGlobalsTest, TheFlagBeatsTheEnvironment) {
  const ScopedEnv key(kApiKeyEnvironmentVariable, "k-env");
  EXPECT_EQ(Parse({"--api-key", "k-flag"}, {})->security.api_key, "k-flag");
  // An empty flag sends none, even with the variable set.
  EXPECT_EQ(Parse({"--api-key="}, {})->security.api_key, "");
}

TEST(ParseGlobalsTest, AnEmptyEnvironmentVariableIsIgnored) {
  const ScopedEnv key(kApiKeyEnvironmentVariable, "");
  absl::StatusOr<Globals> globals = Parse({}, {});
  ASSERT_TRUE(globals.ok()) << globals.status();
  EXPECT_EQ(globals->security.api_key, "");
}

TEST(ParseGlobalsTest, AKeyThatCannotBeMetadataIsRefusedWithoutQuotingIt) {
  {
    const ScopedEnv no_key(kApiKeyEnvironmentVariable, std::nullopt);
    absl::Status status = Parse({"--api-key", "sec\nret"}, {}).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(), HasSubstr("--api-key"));
    EXPECT_THAT(status.message(), Not(HasSubstr("sec")));
    EXPECT_THAT(Parse({"--api-key", " secret"}, {}).status().message(), HasSubstr("space"));
  }
  const ScopedEnv key(kApiKeyEnvironmentVariable, "s\tcret");
  absl::Status status = Parse({}, {}).status();
  EXPECT_THAT(status.message(), HasSubstr(kApiKeyEnvironmentVariable));
  EXPECT_THAT(status.message(), Not(HasSubstr("cret")));
}

TEST(ParseGlobalsTest, TheApiKeyHelpNamesTheVariableAndThePsRisk) {
  for (const base::FlagSpec& spec : GlobalFlagSpecs()) {
    if (spec.name != "api-key") continue;
    EXPECT_THAT(spec.help, HasSubstr("Bearer"));
    EXPECT_THAT(spec.help, HasSubstr("process list"));
    EXPECT_THAT(spec.default_text, HasSubstr(kApiKeyEnvironmentVariable));
    return;
  }
  ADD_FAILURE() << "no --api-key global flag";
}

// Parses `args` against the global flags and `command_specs`, then runs `run` as kvctl does;
// its exit code.
int RunCommand(int (*run)(const Globals&, const ParsedFlags&, std::ostream&, std::ostream&),
               const std::vector<std::string>& args,
               const std::vector<base::FlagSpec>& command_specs,
               const std::vector<std::string>& positional = {}) {
  std::vector<base::FlagSpec> specs = GlobalFlagSpecs();
  specs.insert(specs.end(), command_specs.begin(), command_specs.end());
  absl::StatusOr<ParsedFlags> flags =
      ParseFlags(args, specs, GenerateRepeatableFlags(), positional);
  EXPECT_TRUE(flags.ok()) << flags.status();
  if (!flags.ok()) return kExitBadFlags;
  absl::StatusOr<Globals> globals = ParseGlobals(*flags);
  EXPECT_TRUE(globals.ok()) << globals.status();
  if (!globals.ok()) return kExitBadFlags;
  std::ostringstream out;
  std::ostringstream err;
  const int code = run(*globals, *flags, out, err);
  EXPECT_EQ(code, kExitOk) << err.str();
  return code;
}

TEST(ApiKeyCommandTest, TheFlagReachesTheServerOnEveryCommandsCalls) {
  const ScopedEnv key(kApiKeyEnvironmentVariable, "k-env");
  FakeServer server;
  const std::vector<std::string> globals = {"--target", server.target(), "--timeout-ms",
                                            "10000",    "--api-key",     "k-flag"};
  auto with = [&](std::vector<std::string> args) {
    args.insert(args.begin(), globals.begin(), globals.end());
    return args;
  };
  RunCommand(RunGenerate, with({"--prompt", "hi"}), GenerateFlagSpecs());
  RunCommand(RunStream, with({"--prompt", "hi"}), GenerateFlagSpecs());
  RunCommand(RunPrefixRegister, with({"--name", "sys", "--text", "Hi"}), PrefixRegisterFlagSpecs());
  RunCommand(RunPrefixList, with({}), {});
  RunCommand(RunSessionCreate, with({}), SessionCreateFlagSpecs());
  RunCommand(RunSessionList, with({}), {});
  EXPECT_EQ(server.replica().authorizations(), std::vector<std::string>(6, "Bearer k-flag"));
}

TEST(ApiKeyCommandTest, TheEnvironmentVariableReachesTheServer) {
  const ScopedEnv key(kApiKeyEnvironmentVariable, "k-env");
  FakeServer server;
  RunCommand(RunGenerate, {"--target", server.target(), "--timeout-ms", "10000", "--prompt", "x"},
             GenerateFlagSpecs());
  absl::StatusOr<Globals> globals = Parse({"--target", server.target()}, {});
  ASSERT_TRUE(globals.ok()) << globals.status();
  // What tokenize, info, health and bench use: Connect(globals).
  ASSERT_TRUE(Connect(*globals)->CheckHealth(CallOptions{.timeout = absl::Seconds(10)}).ok());
  EXPECT_THAT(server.replica().authorizations(), ElementsAre("Bearer k-env", "Bearer k-env"));
}

TEST(ApiKeyCommandTest, WithoutAKeyNothingIsSent) {
  const ScopedEnv key(kApiKeyEnvironmentVariable, "");
  FakeServer server;
  RunCommand(RunGenerate, {"--target", server.target(), "--timeout-ms", "10000", "--prompt", "x"},
             GenerateFlagSpecs());
  EXPECT_THAT(server.replica().authorizations(), ElementsAre(""));
}

}  // namespace
}  // namespace kvserve::client
