// Tests of kvctl generate and kvctl stream against the fake server: one sequence's output as it
// always was, several sequences (samples and beams), log-probabilities, JSON, and the flags of
// --help.
#include "client/kvctl_generate.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "client/kvctl_chat.h"
#include "client/request_flags.h"
#include "fake_generation_service.h"
#include "nlohmann/json.hpp"

namespace kvserve::client {
namespace {

using testing::FakeServer;
using ::testing::HasSubstr;
using ::testing::StartsWith;

class GenerateCommandTest : public ::testing::Test {
 protected:
  using RunBody = int (*)(const Globals&, const ParsedFlags&, std::ostream&, std::ostream&);

  // Parses `args` against generate's flags and runs `body`; its exit code.
  int Run(RunBody body, const std::vector<std::string>& args, bool json = false) {
    out_.str("");
    err_.str("");
    absl::StatusOr<ParsedFlags> flags =
        ParseFlags(args, GenerateFlagSpecs(), GenerateRepeatableFlags());
    EXPECT_TRUE(flags.ok()) << flags.status();
    if (!flags.ok()) return -1;
    Globals globals{
        .target = server_.target(), .call = {.timeout = absl::Seconds(10)}, .json = json};
    return body(globals, *flags, out_, err_);
  }
  int Generate(const std::vector<std::string>& args, bool json = false) {
    return Run(RunGenerate, args, json);
  }
  int Stream(const std::vector<std::string>& args, bool json = false) {
    return Run(RunStream, args, json);
  }

  FakeServer server_;
  std::ostringstream out_;
  std::ostringstream err_;
};

constexpr char kSummary[] =
    "finish_reason=length prompt_tokens=2 cached_tokens=0 completion_tokens=3 queue_ms=0.00 "
    "ttft_ms=0.00 decode_ms=0.00 cache=dynamic";

TEST_F(GenerateCommandTest, OneSequenceAsAlways) {
  ASSERT_EQ(Generate({"--prompt", "Hi"}), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), "t0t1t2\n");
  EXPECT_EQ(err_.str(), absl::StrCat(kSummary, " replica=fake-replica\n"));

  ASSERT_EQ(Stream({"--prompt", "Hi"}), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), "t0t1t2\n");
  EXPECT_EQ(err_.str(), absl::StrCat(kSummary, " replica=fake-replica\n"));
}

TEST_F(GenerateCommandTest, OneSequenceWithLogprobs) {
  const std::string expected =
      "t0t1\n"
      "[logprobs]\n"
      "token=10 logprob=-0.2500 top=10:-0.2500,11:-1.2500\n"
      "token=11 logprob=-0.5000 top=11:-0.5000,12:-1.5000\n";
  const std::vector<std::string> args = {
      "--prompt", "Hi", "--max-new-tokens", "2", "--logprobs", "--top-logprobs", "2"};
  ASSERT_EQ(Generate(args), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), expected);
  ASSERT_EQ(Stream(args), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), expected);
}

TEST_F(GenerateCommandTest, OneBeamHasItsScoreInTheSummary) {
  const std::vector<std::string> args = {"--prompt", "Hi", "--num-beams", "3"};
  ASSERT_EQ(Generate(args), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), "t0t1t2\n");
  EXPECT_EQ(err_.str(), absl::StrCat(kSummary, " score=-0.5000 replica=fake-replica\n"));
  ASSERT_EQ(Stream(args), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), "t0t1t2\n");
  EXPECT_EQ(err_.str(), absl::StrCat(kSummary, " score=-0.5000 replica=fake-replica\n"));
}

TEST_F(GenerateCommandTest, SeveralSamples) {
  const std::vector<std::string> args = {
      "--prompt", "Hi", "--do-sample", "--max-new-tokens", "2", "--num-return-sequences", "2"};
  const std::string expected =
      "[sequence 0 finish length]\nt0t1\n"
      "[sequence 1 finish eos]\ns1t0s1t1\n";
  const std::string summary =
      "finish_reason=length prompt_tokens=2 cached_tokens=0 completion_tokens=4 queue_ms=0.00 "
      "ttft_ms=0.00 decode_ms=0.00 cache=dynamic replica=fake-replica\n";
  ASSERT_EQ(Generate(args), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), expected);
  EXPECT_EQ(err_.str(), summary);
  // The fake interleaves the two sequences' tokens; each is printed whole as it ends.
  ASSERT_EQ(Stream(args), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), expected);
  EXPECT_EQ(err_.str(), summary);
}

TEST_F(GenerateCommandTest, SeveralBeamsWithLogprobs) {
  const std::vector<std::string> args = {
      "--prompt",         "Hi",   "--max-new-tokens",       "1", "--num-beams", "4",
      "--early-stopping", "true", "--num-return-sequences", "3", "--logprobs"};
  const std::string expected =
      "[sequence 0 score -0.5000 finish length]\nt0\n[logprobs]\ntoken=10 logprob=-0.2500\n"
      "[sequence 1 score -1.0000 finish eos]\ns1t0\n[logprobs]\ntoken=20 logprob=-0.2500\n"
      "[sequence 2 score -1.5000 finish eos]\ns2t0\n[logprobs]\ntoken=30 logprob=-0.2500\n";
  ASSERT_EQ(Generate(args), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), expected);
  EXPECT_THAT(err_.str(), StartsWith("finish_reason=length "));
  EXPECT_THAT(err_.str(), ::testing::Not(HasSubstr("score=")));
  ASSERT_EQ(Stream(args), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), expected);
  EXPECT_THAT(err_.str(), ::testing::Not(HasSubstr("score=")));
}

TEST_F(GenerateCommandTest, JsonHasEverySequence) {
  ASSERT_EQ(Generate({"--prompt", "Hi", "--max-new-tokens", "1", "--num-beams", "2",
                      "--num-return-sequences", "2", "--logprobs", "--top-logprobs", "1"},
                     true),
            kExitOk)
      << err_.str();
  const nlohmann::json response = nlohmann::json::parse(out_.str());
  ASSERT_EQ(response["sequences"].size(), 2u);
  EXPECT_EQ(response["sequences"][1]["index"], 1);
  EXPECT_EQ(response["sequences"][1]["text"], "s1t0");
  EXPECT_EQ(response["sequences"][1]["score"], -1.0);
  EXPECT_EQ(response["sequences"][1]["logprobs"][0]["chosen"],
            nlohmann::json({{"tokenId", 20}, {"logprob", -0.25}}));
  EXPECT_EQ(response["sequences"][1]["logprobs"][0]["top"][0]["tokenId"], 20);
  EXPECT_EQ(err_.str(), "");

  ASSERT_EQ(Stream({"--prompt", "Hi", "--max-new-tokens", "1", "--do-sample",
                    "--num-return-sequences", "2", "--logprobs"},
                   true),
            kExitOk)
      << err_.str();
  std::vector<nlohmann::json> messages;
  std::istringstream lines(out_.str());
  for (std::string line; std::getline(lines, line);)
    messages.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(messages.size(), 2u);
  EXPECT_EQ(messages[0]["index"], 0);
  EXPECT_EQ(messages[1]["index"], 1);
  EXPECT_EQ(messages[1]["logprobs"][0]["chosen"]["tokenId"], 20);
  EXPECT_TRUE(messages[1].contains("usage"));
}

TEST_F(GenerateCommandTest, BadSequenceFlagsNameTheFlag) {
  EXPECT_EQ(Generate({"--prompt", "Hi", "--num-beams", "many"}), kExitBadFlags);
  EXPECT_EQ(err_.str(),
            "kvctl generate: --num-beams: 'many' is not a 32-bit integer (see kvctl generate "
            "--help)\n");
  EXPECT_EQ(Stream({"--prompt", "Hi", "--early-stopping", "soon"}), kExitBadFlags);
  EXPECT_THAT(err_.str(), StartsWith("kvctl stream: --early-stopping: 'soon' is not true, false "
                                     "or never"));
  EXPECT_EQ(out_.str(), "");
}

// A generation the server's shutdown cut short (finish_reason=cancelled) is not a success: its
// output is printed all the same, and the exit code says it is partial.
TEST_F(GenerateCommandTest, ACancelledGenerationExitsWithItsOwnCode) {
  const std::string why =
      "kvctl: the server cancelled the generation (finish_reason=cancelled: it is shutting "
      "down); the output is partial\n";
  for (const bool json : {false, true}) {
    for (const RunBody body : {RunBody{RunGenerate}, RunBody{RunStream}}) {
      ASSERT_EQ(Run(body, {"--prompt", "drain", "--max-new-tokens", "2"}, json), kExitCancelled)
          << err_.str();
      EXPECT_NE(kExitCancelled, kExitOk);
      EXPECT_NE(kExitCancelled, kExitRpcError);
      EXPECT_NE(kExitCancelled, kExitBadFlags);
      if (json) {
        EXPECT_THAT(out_.str(), HasSubstr("FINISH_REASON_CANCELLED"));
        EXPECT_EQ(err_.str(), why);
      } else {
        EXPECT_EQ(out_.str(), "t0t1\n");
        EXPECT_THAT(err_.str(), StartsWith("finish_reason=cancelled "));
        EXPECT_THAT(err_.str(), ::testing::EndsWith(why));
      }
    }
  }
  // Several sequences: any one cancelled makes the output partial.
  ASSERT_EQ(Stream({"--prompt", "drain", "--do-sample", "--num-return-sequences", "2"}),
            kExitCancelled);
  ASSERT_EQ(Generate({"--prompt", "drain", "--do-sample", "--num-return-sequences", "2"}),
            kExitCancelled);
  // Other finish reasons stay a success.
  EXPECT_EQ(Stream({"--prompt", "Hi", "--do-sample", "--num-return-sequences", "2"}), kExitOk);
}

// The 128 KiB a single command-line argument may hold (Linux's MAX_ARG_STRLEN) no longer bounds
// a prompt: the whole file reaches the server, which counts one prompt token per byte.
TEST_F(GenerateCommandTest, APromptFileLargerThanAnArgumentReachesTheServer) {
  const std::string path = ::testing::TempDir() + "kvctl_generate_large_prompt.txt";
  std::ofstream(path, std::ios::binary) << std::string(300 << 10, 'p');
  for (const RunBody body : {RunBody{RunGenerate}, RunBody{RunStream}}) {
    ASSERT_EQ(Run(body, {"--prompt-file", path}), kExitOk) << err_.str();
    EXPECT_THAT(err_.str(), StartsWith("finish_reason=length prompt_tokens=307200 "));
  }
  std::remove(path.c_str());
}

TEST(GenerateCommandsTest, HelpListsTheFlagsAndTheOutput) {
  for (const Command& command : {GenerateCommand(), StreamCommand()}) {
    std::vector<std::string> names;
    for (const base::FlagSpec& spec : command.specs) names.push_back(spec.name);
    for (const char* name : {"num-beams", "num-return-sequences", "early-stopping",
                             "length-penalty", "logprobs", "top-logprobs"}) {
      EXPECT_THAT(names, ::testing::Contains(name)) << command.name;
    }
    EXPECT_THAT(command.details, HasSubstr("[sequence I score S finish F]"));
    EXPECT_THAT(command.details, HasSubstr("token=ID logprob=LP top=ID:LP"));
    EXPECT_THAT(command.details, HasSubstr("exit code 3"));
  }
  EXPECT_EQ(GenerateCommand().name, "generate");
  EXPECT_EQ(StreamCommand().name, "stream");
}

// chat shares the sampling flags, not the sequence flags: one answer per turn.
TEST(GenerateCommandsTest, ChatTakesNoSequenceFlags) {
  for (const char* flag : {"--num-beams", "--num-return-sequences", "--top-logprobs"}) {
    EXPECT_FALSE(ParseFlags({flag, "2"}, ChatFlagSpecs(), ChatRepeatableFlags()).ok()) << flag;
  }
  EXPECT_FALSE(ParseFlags({"--logprobs"}, ChatFlagSpecs(), ChatRepeatableFlags()).ok());
}

}  // namespace
}  // namespace kvserve::client
