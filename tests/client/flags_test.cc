// Tests of kvctl's flag parsing: repeatable flags, values that look like flags, positional
// arguments, typed getters.
#include "client/flags.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kvserve::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<base::FlagSpec> Specs() {
  return {{"prompt", "text", ""},         {"stop", "repeatable", ""}, {"count", "an int", ""},
          {"seed", "a uint64", ""},       {"ratio", "a float", ""},   {"flag", "true or false", ""},
          {"verbose", "switch", "", true}};
}

absl::StatusOr<ParsedFlags> Parse(const std::vector<std::string>& args) {
  return ParseFlags(args, Specs(), {"stop"});
}

TEST(ParseFlagsTest, RepeatableFlagKeepsEveryValueInOrder) {
  absl::StatusOr<ParsedFlags> parsed =
      Parse({"--stop", "a", "--prompt=x", "--stop=b,c", "--stop", ""});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_THAT(parsed->repeated.at("stop"), ElementsAre("a", "b,c", ""));
  EXPECT_EQ(parsed->flags.GetString("prompt"), "x");
  EXPECT_FALSE(parsed->flags.Has("stop"));
}

TEST(ParseFlagsTest, AValueThatLooksLikeARepeatableFlagStaysAValue) {
  absl::StatusOr<ParsedFlags> parsed = Parse({"--prompt", "--stop", "--stop", "--prompt"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->flags.GetString("prompt"), "--stop");
  EXPECT_THAT(parsed->repeated.at("stop"), ElementsAre("--prompt"));
}

TEST(ParseFlagsTest, NeverGivenRepeatableIsAbsent) {
  absl::StatusOr<ParsedFlags> parsed = Parse({"--verbose"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_FALSE(parsed->repeated.contains("stop"));
}

TEST(ParseFlagsTest, ErrorsNameTheFlag) {
  EXPECT_THAT(Parse({"--stop"}).status().message(), HasSubstr("--stop"));
  EXPECT_THAT(Parse({"--bogus", "1"}).status().message(), HasSubstr("--bogus"));
  EXPECT_THAT(Parse({"--count"}).status().message(), HasSubstr("--count"));
  EXPECT_THAT(Parse({"positional"}).status().message(), HasSubstr("positional"));
  EXPECT_EQ(Parse({"--stop"}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ParseFlagsTest, PositionalArgumentsAnywhereUpToTheirNumber) {
  absl::StatusOr<ParsedFlags> parsed =
      ParseFlags({"abc", "--count", "7", "-5", "--verbose"}, Specs(), {"stop"}, {"ID", "N"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_THAT(parsed->arguments, ElementsAre("abc", "-5"));
  EXPECT_EQ(parsed->flags.GetString("count"), "7");  // a flag's value is not an argument
  EXPECT_EQ(parsed->GetSwitch("verbose"), true);

  absl::StatusOr<ParsedFlags> fewer = ParseFlags({"abc"}, Specs(), {}, {"ID", "N"});
  ASSERT_TRUE(fewer.ok()) << fewer.status();
  EXPECT_THAT(fewer->arguments, ElementsAre("abc"));  // for the command to refuse

  absl::StatusOr<ParsedFlags> more = ParseFlags({"abc", "def"}, Specs(), {}, {"ID"});
  EXPECT_EQ(more.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(more.status().message(), HasSubstr("unexpected argument 'def'"));

  // Without names, none is accepted.
  EXPECT_THAT(Parse({"abc"}).status().message(), HasSubstr("unexpected argument 'abc'"));
  EXPECT_TRUE(Parse({})->arguments.empty());
}

TEST(ParseFlagsTest, HelpIsReported) {
  absl::StatusOr<ParsedFlags> parsed = Parse({"--help"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->flags.help_requested());
}

TEST(ParsedFlagsTest, TypedGettersUnsetAndSet) {
  absl::StatusOr<ParsedFlags> parsed =
      Parse({"--count", "-7", "--seed", "18446744073709551615", "--ratio", "0.25", "--flag",
             "false", "--verbose=false"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed->GetInt32("count"), -7);
  EXPECT_EQ(*parsed->GetInt64("count"), -7);
  EXPECT_EQ(*parsed->GetUint64("seed"), 18446744073709551615ULL);
  EXPECT_EQ(*parsed->GetFloat("ratio"), 0.25f);
  EXPECT_EQ(*parsed->GetBoolValue("flag"), false);
  EXPECT_EQ(parsed->GetSwitch("verbose"), false);

  absl::StatusOr<ParsedFlags> empty = Parse({});
  ASSERT_TRUE(empty.ok());
  EXPECT_FALSE(empty->GetInt32("count")->has_value());
  EXPECT_FALSE(empty->GetUint64("seed")->has_value());
  EXPECT_FALSE(empty->GetFloat("ratio")->has_value());
  EXPECT_FALSE(empty->GetBoolValue("flag")->has_value());
  EXPECT_FALSE(empty->GetSwitch("verbose").has_value());
}

TEST(ParsedFlagsTest, MalformedValuesNameTheFlag) {
  absl::StatusOr<ParsedFlags> parsed =
      Parse({"--count", "3000000000", "--seed", "-1", "--ratio", "abc", "--flag", "yes"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_THAT(parsed->GetInt32("count").status().message(), HasSubstr("--count"));
  EXPECT_TRUE(parsed->GetInt64("count").ok());
  EXPECT_THAT(parsed->GetUint64("seed").status().message(), HasSubstr("--seed"));
  EXPECT_THAT(parsed->GetFloat("ratio").status().message(), HasSubstr("--ratio"));
  EXPECT_THAT(parsed->GetBoolValue("flag").status().message(), HasSubstr("--flag"));
}

}  // namespace
}  // namespace kvserve::client
