// Tests for the shared --flag parser of the command-line tools.
#include "base/command_line.h"

#include <gtest/gtest.h>

namespace kvserve::base {
namespace {

absl::StatusOr<CommandLine> ParseArgs(std::vector<std::string> args) {
  std::vector<char*> argv = {const_cast<char*>("prog")};
  for (std::string& a : args) argv.push_back(a.data());
  return CommandLine::Parse(static_cast<int>(argv.size()), argv.data(),
                            {{"model", "m"},
                             {"max-new-tokens", "n"},
                             {"top-p", "p"},
                             {"ids", "i"},
                             {"no-cache", "b", "", true}});
}

TEST(CommandLineTest, ParsesValuesSwitchesAndEqualsForm) {
  auto cl = ParseArgs(
      {"--model", "/m", "--max-new-tokens=7", "--no-cache", "--top-p", "0.5", "--ids", "1, 2,3"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->GetString("model"), "/m");
  EXPECT_EQ(*cl->GetInt("max-new-tokens", 0), 7);
  EXPECT_TRUE(cl->GetBool("no-cache"));
  EXPECT_DOUBLE_EQ(*cl->GetDouble("top-p", 1.0), 0.5);
  EXPECT_EQ(*cl->GetIntList("ids"), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(*cl->GetInt("absent", 42), 42);
  EXPECT_FALSE(cl->help_requested());
}

TEST(CommandLineTest, ErrorsNameTheFlag) {
  auto unknown = ParseArgs({"--modle", "x"});
  EXPECT_NE(unknown.status().message().find("--modle"), std::string::npos);
  auto missing = ParseArgs({"--model"});
  EXPECT_NE(missing.status().message().find("--model needs a value"), std::string::npos);
  auto positional = ParseArgs({"stray"});
  EXPECT_NE(positional.status().message().find("stray"), std::string::npos);
  auto bad_switch = ParseArgs({"--no-cache=maybe"});
  EXPECT_FALSE(bad_switch.ok());
  auto cl = ParseArgs({"--max-new-tokens", "many", "--ids", "1,x"});
  ASSERT_TRUE(cl.ok());
  EXPECT_NE(cl->GetInt("max-new-tokens", 0).status().message().find("--max-new-tokens"),
            std::string::npos);
  EXPECT_NE(cl->GetIntList("ids").status().message().find("'x'"), std::string::npos);
}

TEST(CommandLineTest, HelpListsEveryFlag) {
  auto cl = ParseArgs({"--help"});
  ASSERT_TRUE(cl.ok());
  EXPECT_TRUE(cl->help_requested());
  const std::string usage = cl->Usage("prog", "does things");
  for (const char* f : {"--model", "--max-new-tokens", "--top-p", "--ids", "--no-cache"}) {
    EXPECT_NE(usage.find(f), std::string::npos) << f;
  }
}

}  // namespace
}  // namespace kvserve::base
