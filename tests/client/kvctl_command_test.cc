// Tests of what every kvctl command shares: the global flags, above all the routing key's
// default (--route, else --prefix, else --name), and that a command sends it.
#include "client/kvctl_command.h"

#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "client/kvctl_bench.h"
#include "client/kvctl_prefix.h"
#include "client/kvctl_session.h"
#include "client/request_flags.h"
#include "fake_generation_service.h"

namespace kvserve::client {
namespace {

using ::testing::ElementsAre;
using testing::FakeServer;
using ::testing::HasSubstr;

// Parses `args` against the global flags and `command_specs`, as kvctl does.
absl::StatusOr<Globals> Parse(const std::vector<std::string>& args,
                              const std::vector<cli::FlagSpec>& command_specs) {
  std::vector<cli::FlagSpec> specs = GlobalFlagSpecs();
  specs.insert(specs.end(), command_specs.begin(), command_specs.end());
  absl::StatusOr<ParsedFlags> flags = ParseFlags(args, specs, GenerateRepeatableFlags());
  if (!flags.ok()) return flags.status();
  return ParseGlobals(*flags);
}

TEST(ParseGlobalsTest, Defaults) {
  absl::StatusOr<Globals> globals = Parse({}, {});
  ASSERT_TRUE(globals.ok()) << globals.status();
  EXPECT_EQ(globals->target, "127.0.0.1:50051");
  EXPECT_FALSE(globals->call.timeout.has_value());
  EXPECT_EQ(globals->call.route, "");
  EXPECT_FALSE(globals->json);
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

TEST(ParseGlobalsTest, RouteDefaultsToThePrefixName) {
  const std::vector<cli::FlagSpec> generate = GenerateFlagSpecs();
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
  std::vector<cli::FlagSpec> specs = GlobalFlagSpecs();
  for (const cli::FlagSpec& spec : PrefixRegisterFlagSpecs()) specs.push_back(spec);
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

}  // namespace
}  // namespace kvserve::client
