// Tests of kvctl's flag parsing: repeatable flags, flags given where a value belongs, switches,
// positional arguments, typed getters.
#include "client/flags.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

namespace kvserve::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

std::vector<base::FlagSpec> Specs() {
  return {{"prompt", "text", ""},   {"stop", "repeatable", ""}, {"count", "an int", ""},
          {"seed", "a uint64", ""}, {"ratio", "a float", ""},   {"verbose", "switch", "", true}};
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

TEST(ParseFlagsTest, AFlagAfterAValueFlagIsNotItsValue) {
  // `generate --prompt --ignore-eos` once generated from the text "--ignore-eos".
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"--prompt", "--verbose"},
                                             {"--prompt", "--count=3"},
                                             {"--prompt", "--help"},
                                             {"--prompt", "-h"},
                                             {"--stop", "--prompt", "x"},
                                             {"--count", "--stop", "a"}}) {
    absl::StatusOr<ParsedFlags> parsed = Parse(args);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << args[1];
    const std::string name = args[0];
    EXPECT_THAT(parsed.status().message(),
                HasSubstr(absl::StrCat(name, " needs a value, but the next argument ", args[1],
                                       " is a flag (write ", name, "=", args[1])));
  }
}

TEST(ParseFlagsTest, AValueThatLooksLikeAFlagIsGivenWithAnEqualsSign) {
  absl::StatusOr<ParsedFlags> parsed = Parse({"--prompt=--stop", "--stop=--prompt"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->flags.GetString("prompt"), "--stop");
  EXPECT_THAT(parsed->repeated.at("stop"), ElementsAre("--prompt"));
  // Dashes that name no flag of the command are a value as they are.
  parsed = Parse({"--prompt", "--- a separator", "--stop", "--", "--count", "-5"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->flags.GetString("prompt"), "--- a separator");
  EXPECT_THAT(parsed->repeated.at("stop"), ElementsAre("--"));
  EXPECT_EQ(*parsed->GetInt32("count"), -5);
}

TEST(ParseFlagsTest, FlagValueAfter) {
  const std::vector<std::string> args = {"--target", "--output", "json", "--target"};
  EXPECT_EQ(*FlagValueAfter("output", args, 1, Specs()), "json");
  EXPECT_EQ(FlagValueAfter("target", args, 3, Specs()).status().message(),
            "--target needs a value");
  // --output is no flag of Specs(): a value.
  EXPECT_EQ(*FlagValueAfter("target", args, 0, Specs()), "--output");
  EXPECT_FALSE(FlagValueAfter("target", args, 0, {{"output", "", ""}}).ok());
}

TEST(ParseFlagsTest, IsKnownFlag) {
  EXPECT_TRUE(IsKnownFlag("--prompt", Specs()));
  EXPECT_TRUE(IsKnownFlag("--prompt=x", Specs()));
  EXPECT_TRUE(IsKnownFlag("--help", Specs()));
  EXPECT_TRUE(IsKnownFlag("-h", Specs()));
  EXPECT_FALSE(IsKnownFlag("--bogus", Specs()));
  EXPECT_FALSE(IsKnownFlag("--", Specs()));
  EXPECT_FALSE(IsKnownFlag("-prompt", Specs()));
  EXPECT_FALSE(IsKnownFlag("prompt", Specs()));
}

TEST(ParseFlagsTest, ASwitchTakesNoSeparateValue) {
  absl::StatusOr<ParsedFlags> parsed = Parse({"--verbose", "false"});
  EXPECT_EQ(parsed.status().message(),
            "unexpected argument 'false': --verbose is a switch; write --verbose=false");
  parsed = Parse({"--verbose", "true"});
  EXPECT_EQ(parsed.status().message(),
            "unexpected argument 'true': --verbose is a switch; write --verbose=true or --verbose "
            "alone");
  // A switch followed by a value flag: both given.
  parsed = Parse({"--verbose", "--count", "5"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->GetSwitch("verbose"), true);
  EXPECT_EQ(*parsed->GetInt32("count"), 5);
  // Where the command takes a positional argument, "false" is that argument.
  parsed = ParseFlags({"--verbose", "false"}, Specs(), {}, {"ID"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_THAT(parsed->arguments, ElementsAre("false"));
}

// BadFlags adds "(see kvctl COMMAND --help)": the parser's messages must not add their own.
TEST(ParseFlagsTest, ErrorsCarryNoHelpHint) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"--bogus"}, {"positional"}, {"--count"}, {"--verbose=maybe"}, {"--stop"}}) {
    const absl::Status status = Parse(args).status();
    EXPECT_FALSE(status.ok()) << args[0];
    EXPECT_THAT(status.message(), Not(HasSubstr("help"))) << args[0];
  }
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
  absl::StatusOr<ParsedFlags> parsed = Parse(
      {"--count", "-7", "--seed", "18446744073709551615", "--ratio", "0.25", "--verbose=false"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed->GetInt32("count"), -7);
  EXPECT_EQ(*parsed->GetInt64("count"), -7);
  EXPECT_EQ(*parsed->GetUint64("seed"), 18446744073709551615ULL);
  EXPECT_EQ(*parsed->GetFloat("ratio"), 0.25f);
  EXPECT_EQ(parsed->GetSwitch("verbose"), false);

  absl::StatusOr<ParsedFlags> empty = Parse({});
  ASSERT_TRUE(empty.ok());
  EXPECT_FALSE(empty->GetInt32("count")->has_value());
  EXPECT_FALSE(empty->GetUint64("seed")->has_value());
  EXPECT_FALSE(empty->GetFloat("ratio")->has_value());
  EXPECT_FALSE(empty->GetSwitch("verbose").has_value());
}

TEST(ParsedFlagsTest, MalformedValuesNameTheFlag) {
  absl::StatusOr<ParsedFlags> parsed =
      Parse({"--count", "3000000000", "--seed", "-1", "--ratio", "abc"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_THAT(parsed->GetInt32("count").status().message(), HasSubstr("--count"));
  EXPECT_TRUE(parsed->GetInt64("count").ok());
  EXPECT_THAT(parsed->GetUint64("seed").status().message(), HasSubstr("--seed"));
  EXPECT_THAT(parsed->GetFloat("ratio").status().message(), HasSubstr("--ratio"));
}

}  // namespace
}  // namespace kvserve::client
