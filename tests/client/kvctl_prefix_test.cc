// Tests of kvctl prefix: register's flags onto RegisterPrefixRequest (each content kind, unset
// options staying unset, refusals naming the flag) and each subcommand against the fake server.
#include "client/kvctl_prefix.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "fake_generation_service.h"
#include "nlohmann/json.hpp"

namespace kvserve::client {
namespace kvctl_prefix_test {

using ::testing::ElementsAre;
using testing::FakeServer;
using ::testing::HasSubstr;

absl::StatusOr<v1::RegisterPrefixRequest> Build(const std::vector<std::string>& args) {
  absl::StatusOr<ParsedFlags> parsed = ParseFlags(args, PrefixRegisterFlagSpecs());
  if (!parsed.ok()) return parsed.status();
  return BuildRegisterPrefixRequest(*parsed);
}

// A file under the test's temporary directory holding `content`; its path.
std::string WriteTempFile(const std::string& name, const std::string& content) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

TEST(BuildRegisterPrefixRequestTest, TextAloneLeavesOptionsUnset) {
  absl::StatusOr<v1::RegisterPrefixRequest> request =
      Build({"--name", "sys", "--text", "You are terse."});
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->name(), "sys");
  EXPECT_EQ(request->content_case(), v1::RegisterPrefixRequest::kText);
  EXPECT_EQ(request->text(), "You are terse.");
  EXPECT_FALSE(request->has_options());
}

TEST(BuildRegisterPrefixRequestTest, FileIsReadWhole) {
  const std::string content = "line one\nline two\n\n\tend";
  const std::string path = WriteTempFile("kvctl_prefix_file.txt", content);
  absl::StatusOr<v1::RegisterPrefixRequest> request = Build({"--name", "sys", "--file", path});
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->content_case(), v1::RegisterPrefixRequest::kText);
  EXPECT_EQ(request->text(), content);
  std::remove(path.c_str());
}

TEST(BuildRegisterPrefixRequestTest, TokenIdsAndMessages) {
  absl::StatusOr<v1::RegisterPrefixRequest> ids =
      Build({"--name", "ids", "--token-ids", "1,450,29"});
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_THAT(ids->token_ids().ids(), ElementsAre(1, 450, 29));

  absl::StatusOr<v1::RegisterPrefixRequest> chat =
      Build({"--name", "chat", "--messages", R"([{"role":"system","content":"Be brief."}])"});
  ASSERT_TRUE(chat.ok()) << chat.status();
  ASSERT_EQ(chat->messages().messages_size(), 1);
  EXPECT_EQ(chat->messages().messages(0).role(), "system");
  EXPECT_EQ(chat->messages().messages(0).content(), "Be brief.");
  EXPECT_FALSE(chat->has_options());
}

TEST(BuildRegisterPrefixRequestTest, EachOptionAloneSetsOnlyItself) {
  absl::StatusOr<v1::RegisterPrefixRequest> pinned =
      Build({"--name", "a", "--text", "x", "--pinned=false"});
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  ASSERT_TRUE(pinned->has_options());
  EXPECT_TRUE(pinned->options().has_pinned());
  EXPECT_FALSE(pinned->options().pinned());
  EXPECT_EQ(pinned->options().ttl_seconds(), 0);
  EXPECT_EQ(pinned->options().cache_implementation(), "");

  absl::StatusOr<v1::RegisterPrefixRequest> retention =
      Build({"--name", "a", "--text", "x", "--retention", "low"});
  ASSERT_TRUE(retention.ok()) << retention.status();
  EXPECT_EQ(retention->options().retention(), "low");
  EXPECT_FALSE(retention->options().has_pinned());

  absl::StatusOr<v1::RegisterPrefixRequest> ttl =
      Build({"--name", "a", "--text", "x", "--ttl-seconds", "600"});
  ASSERT_TRUE(ttl.ok()) << ttl.status();
  EXPECT_FALSE(ttl->options().has_pinned());
  EXPECT_EQ(ttl->options().ttl_seconds(), 600);
  EXPECT_EQ(ttl->options().cache_implementation(), "");

  absl::StatusOr<v1::RegisterPrefixRequest> cache =
      Build({"--name", "a", "--text", "x", "--cache-implementation", "dynamic"});
  ASSERT_TRUE(cache.ok()) << cache.status();
  EXPECT_FALSE(cache->options().has_pinned());
  EXPECT_EQ(cache->options().ttl_seconds(), 0);
  EXPECT_EQ(cache->options().cache_implementation(), "dynamic");
}

// --pinned is a switch, as the README shows it: `--pinned --ttl-seconds 5` once failed.
TEST(BuildRegisterPrefixRequestTest, PinnedIsASwitch) {
  absl::StatusOr<v1::RegisterPrefixRequest> request =
      Build({"--name", "a", "--text", "x", "--pinned", "--ttl-seconds", "5"});
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_TRUE(request->options().has_pinned());
  EXPECT_TRUE(request->options().pinned());
  EXPECT_EQ(request->options().ttl_seconds(), 5);
  // The old spelling with a separate value is refused saying what to write instead.
  EXPECT_EQ(Build({"--name", "a", "--text", "x", "--pinned", "false"}).status().message(),
            "unexpected argument 'false': --pinned is a switch; write --pinned=false");
}

TEST(BuildRegisterPrefixRequestTest, FileDashReadsStandardInput) {
  absl::StatusOr<ParsedFlags> parsed =
      ParseFlags({"--name", "sys", "--file", "-"}, PrefixRegisterFlagSpecs());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  std::istringstream in("from\nstdin\n");
  absl::StatusOr<v1::RegisterPrefixRequest> request = BuildRegisterPrefixRequest(*parsed, in);
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->text(), "from\nstdin\n");
}

TEST(BuildRegisterPrefixRequestTest, EveryOption) {
  absl::StatusOr<v1::RegisterPrefixRequest> request =
      Build({"--name", "a", "--token-ids", "3", "--pinned=true", "--ttl-seconds=0",
             "--cache-implementation", "quantized"});
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_TRUE(request->options().has_pinned());
  EXPECT_TRUE(request->options().pinned());
  EXPECT_EQ(request->options().ttl_seconds(), 0);
  EXPECT_EQ(request->options().cache_implementation(), "quantized");
}

TEST(BuildRegisterPrefixRequestTest, NameAndOneContentAreRequired) {
  EXPECT_THAT(Build({"--text", "x"}).status().message(), HasSubstr("--name"));
  EXPECT_THAT(Build({"--name", "", "--text", "x"}).status().message(), HasSubstr("--name"));
  EXPECT_EQ(Build({"--name", "a"}).status().message(),
            "one of --text, --file, --token-ids, --messages is required");
  EXPECT_EQ(Build({"--name", "a", "--text", "x", "--token-ids", "1"}).status().message(),
            "give only one of --text, --file, --token-ids, --messages");
  EXPECT_EQ(Build({"--name", "a", "--text", "x", "--file", "f"}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(BuildRegisterPrefixRequestTest, MalformedValuesNameTheFlag) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--token-ids", "1,x"}, "--token-ids"},
      {{"--messages", "{}"}, "--messages"},
      {{"--text", "x", "--pinned=yes"}, "--pinned"},
      {{"--text", "x", "--ttl-seconds", "soon"}, "--ttl-seconds"},
      {{"--text", "x", "--unknown", "1"}, "--unknown"},
  };
  for (const auto& [flags, name] : cases) {
    std::vector<std::string> args = {"--name", "a"};
    args.insert(args.end(), flags.begin(), flags.end());
    absl::StatusOr<v1::RegisterPrefixRequest> request = Build(args);
    ASSERT_FALSE(request.ok()) << name;
    EXPECT_EQ(request.status().code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_THAT(request.status().message(), HasSubstr(name));
  }
}

TEST(BuildRegisterPrefixRequestTest, UnreadableFileNamesThePath) {
  const std::string missing = ::testing::TempDir() + "kvctl_prefix_no_such_file.txt";
  absl::StatusOr<v1::RegisterPrefixRequest> request = Build({"--name", "a", "--file", missing});
  EXPECT_EQ(request.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(request.status().message(), HasSubstr("--file: cannot read '" + missing + "'"));
  EXPECT_THAT(request.status().message(), HasSubstr("No such file"));

  // A directory opens but cannot be read.
  request = Build({"--name", "a", "--file", ::testing::TempDir()});
  EXPECT_EQ(request.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(request.status().message(), HasSubstr("--file: cannot read"));
}

TEST(PrefixCommandGroupTest, RegisterGetListDelete) {
  const CommandGroup group = PrefixCommandGroup();
  EXPECT_EQ(group.name, "prefix");
  std::vector<std::string> names;
  for (const Command& command : group.commands) {
    names.push_back(command.name);
    EXPECT_NE(command.run, nullptr) << command.name;
  }
  EXPECT_THAT(names, ElementsAre("register", "get", "list", "delete"));
}

// Runs the subcommands against a fake server, keeping what they print.
class PrefixCommandTest : public ::testing::Test {
 protected:
  using RunBody = int (*)(const Globals&, const ParsedFlags&, std::ostream&, std::ostream&);

  // Parses `args` against the subcommand's flags and runs it; its exit code.
  int Run(RunBody body, const std::vector<base::FlagSpec>& specs,
          const std::vector<std::string>& args, bool json = false) {
    out_.str("");
    err_.str("");
    absl::StatusOr<ParsedFlags> flags = ParseFlags(args, specs);
    EXPECT_TRUE(flags.ok()) << flags.status();
    if (!flags.ok()) return -1;
    Globals globals{
        .target = server_.target(), .call = {.timeout = absl::Seconds(10)}, .json = json};
    return body(globals, *flags, out_, err_);
  }

  int Register(const std::vector<std::string>& args, bool json = false) {
    return Run(RunPrefixRegister, PrefixRegisterFlagSpecs(), args, json);
  }
  int Get(const std::vector<std::string>& args, bool json = false) {
    return Run(RunPrefixGet, {{"name", "", ""}}, args, json);
  }
  int List(bool json = false) { return Run(RunPrefixList, {}, {}, json); }
  int Delete(const std::vector<std::string>& args, bool json = false) {
    return Run(RunPrefixDelete, {{"name", "", ""}}, args, json);
  }

  FakeServer server_;
  std::ostringstream out_;
  std::ostringstream err_;
};

TEST_F(PrefixCommandTest, TextOutput) {
  ASSERT_EQ(List(), kExitOk);
  EXPECT_EQ(out_.str(), "no prefixes\n");

  ASSERT_EQ(Register({"--name", "sys", "--token-ids", "5,6,7", "--ttl-seconds", "60"}), kExitOk)
      << err_.str();
  EXPECT_EQ(out_.str(),
            "name=sys num_tokens=3 bytes=768 hits=0 pinned=true ttl=60s "
            "created_at=2023-11-14T22:13:20Z fingerprint=0123456789ab shared=false tier=-\n");
  EXPECT_EQ(err_.str(), "");
  // Unset options stayed unset on the wire.
  const v1::RegisterPrefixRequest sent = server_.prefix_cache().last_register_request();
  EXPECT_FALSE(sent.options().has_pinned());
  EXPECT_EQ(sent.options().cache_implementation(), "");
  EXPECT_FALSE(sent.shared());
  ASSERT_EQ(Register({"--name", "common", "--token-ids", "5,6", "--shared"}), kExitOk)
      << err_.str();
  EXPECT_TRUE(server_.prefix_cache().last_register_request().shared());
  ASSERT_EQ(Delete({"--name", "common"}), kExitOk) << err_.str();

  ASSERT_EQ(Get({"--name", "sys"}), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(),
            "name=sys num_tokens=3 bytes=768 hits=0 pinned=true ttl=60s "
            "created_at=2023-11-14T22:13:20Z fingerprint=0123456789ab shared=false tier=-\n");

  ASSERT_EQ(List(), kExitOk) << err_.str();
  EXPECT_EQ(
      out_.str(),
      "NAME  TOKENS  BYTES  HITS  PINNED  TTL  CREATED_AT            FINGERPRINT   SHARED  TIER\n"
      "sys   3       768    0     true    60s  2023-11-14T22:13:20Z  0123456789ab  false   -\n");

  ASSERT_EQ(Delete({"--name", "sys"}), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), "deleted sys\n");

  EXPECT_EQ(Get({"--name", "sys"}), kExitRpcError);
  EXPECT_EQ(out_.str(), "");
  EXPECT_EQ(err_.str(), "kvctl: NOT_FOUND: prefix 'sys' is not registered\n");
  EXPECT_EQ(Delete({"--name", "sys"}), kExitRpcError);
  EXPECT_EQ(err_.str(), "kvctl: NOT_FOUND: prefix 'sys' is not registered\n");
}

TEST_F(PrefixCommandTest, JsonOutput) {
  ASSERT_EQ(Register({"--name", "sys", "--text", "Hi", "--pinned=false"}, /*json=*/true), kExitOk)
      << err_.str();
  const nlohmann::json registered = nlohmann::json::parse(out_.str());
  EXPECT_EQ(registered["name"], "sys");
  EXPECT_EQ(registered["numTokens"], 3);
  EXPECT_EQ(registered["options"]["pinned"], false);
  EXPECT_EQ(registered["createdAt"], "2023-11-14T22:13:20Z");

  ASSERT_EQ(Get({"--name", "sys"}, /*json=*/true), kExitOk) << err_.str();
  EXPECT_EQ(nlohmann::json::parse(out_.str()), registered);

  ASSERT_EQ(List(/*json=*/true), kExitOk) << err_.str();
  EXPECT_EQ(nlohmann::json::parse(out_.str()), nlohmann::json({{"prefixes", {registered}}}));

  ASSERT_EQ(Delete({"--name", "sys"}, /*json=*/true), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), "{}\n");
}

TEST_F(PrefixCommandTest, BadFlagsExitTwoWithoutCalling) {
  EXPECT_EQ(Register({"--text", "x"}), kExitBadFlags);
  EXPECT_EQ(err_.str(),
            "kvctl prefix register: --name is required (see kvctl prefix register --help)\n");
  EXPECT_EQ(Register({"--name", "a", "--text", "x", "--messages", "[]"}), kExitBadFlags);
  EXPECT_THAT(err_.str(), HasSubstr("give only one of"));
  EXPECT_EQ(Get({}), kExitBadFlags);
  EXPECT_THAT(err_.str(), HasSubstr("kvctl prefix get: --name is required"));
  EXPECT_EQ(Delete({}), kExitBadFlags);
  EXPECT_THAT(err_.str(), HasSubstr("kvctl prefix delete: --name is required"));
  EXPECT_EQ(out_.str(), "");
  EXPECT_EQ(server_.prefix_cache().last_register_request().name(), "");  // nothing sent
}

TEST_F(PrefixCommandTest, EmptyFileIsSentAsEmptyText) {
  const std::string path = WriteTempFile("kvctl_prefix_empty.txt", "");
  ASSERT_EQ(Register({"--name", "a", "--file", path}), kExitOk) << err_.str();
  const v1::RegisterPrefixRequest sent = server_.prefix_cache().last_register_request();
  EXPECT_EQ(sent.content_case(), v1::RegisterPrefixRequest::kText);
  EXPECT_EQ(sent.text(), "");
  std::remove(path.c_str());
}

TEST(PrefixCommandUnreachableTest, NoServerIsAnRpcError) {
  std::string target;
  {
    FakeServer gone;
    target = gone.target();
  }
  absl::StatusOr<ParsedFlags> flags = ParseFlags({}, {});
  ASSERT_TRUE(flags.ok()) << flags.status();
  std::ostringstream out;
  std::ostringstream err;
  const Globals globals{.target = target, .call = {.timeout = absl::Seconds(10)}};
  EXPECT_EQ(RunPrefixList(globals, *flags, out, err), kExitRpcError);
  EXPECT_EQ(out.str(), "");
  EXPECT_THAT(err.str(), ::testing::AnyOf(::testing::StartsWith("kvctl: UNAVAILABLE: "),
                                          ::testing::StartsWith("kvctl: DEADLINE_EXCEEDED: ")));
}

}  // namespace kvctl_prefix_test
}  // namespace kvserve::client
