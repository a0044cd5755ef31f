// Tests of ParseGbnf: llama.cpp-style grammars accepted and matched, and refusals with positions.
#include "constraint/gbnf.h"

#include <string>

#include "constraint/matcher.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvserve::constraint {
namespace gbnf_test {

using ::testing::HasSubstr;

Matcher MatcherFor(std::string_view text) {
  auto grammar = ParseGbnf(text);
  EXPECT_TRUE(grammar.ok()) << grammar.status();
  auto compiled = CompiledGrammar::Create(*std::move(grammar));
  EXPECT_TRUE(compiled.ok()) << compiled.status();
  return Matcher(*compiled);
}

// A JSON grammar in the shape of llama.cpp's grammars/json.gbnf (written here from the JSON
// specification): nested values, strings with escapes, numbers, bounded whitespace.
constexpr char kJson[] = R"(
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\bfnrt/] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws

# Optional space: at most one newline and twenty spaces.
ws ::= | " " | "\n" [ \t]{0,20}
)";

TEST(GbnfTest, JsonGrammarAcceptsJsonAndRejectsTheRest) {
  Matcher m = MatcherFor(kJson);
  EXPECT_TRUE(m.Matches(R"({"a": [1, 2.5, -3e5], "b": {"c": null}, "d": "x\"y\u00e9"})"));
  EXPECT_TRUE(m.Matches("{}"));
  EXPECT_TRUE(m.Matches("{\"é\": true}"));
  EXPECT_FALSE(m.Matches(R"({"a": })"));
  EXPECT_FALSE(m.Matches(R"({"a": 1,})"));
  EXPECT_FALSE(m.Matches(R"([1])"));  // root is an object
  EXPECT_FALSE(m.Matches("{\"a\": \"\x01\"}"));
  // A long array does not deepen the matcher's stacks without bound.
  std::string long_array = "{\"a\": [";
  for (int i = 0; i < 2000; ++i) long_array += i ? ",1" : "1";
  long_array += "]}";
  EXPECT_TRUE(m.Matches(long_array));
  EXPECT_LT(m.arena_size(), 2000);
}

TEST(GbnfTest, PostfixesGroupsAndClasses) {
  Matcher m = MatcherFor(R"(root ::= ("ab" | [x-z])+ "." [^a-c\n]? digit{2,3}
digit ::= [0-9])");
  EXPECT_TRUE(m.Matches("abx.d12"));
  EXPECT_TRUE(m.Matches("zz.123"));
  EXPECT_TRUE(m.Matches("ab.é99"));
  EXPECT_FALSE(m.Matches(".12"));
  EXPECT_FALSE(m.Matches("ab.a12"));
  EXPECT_FALSE(m.Matches("ab.x1234"));
  EXPECT_TRUE(m.Matches("ab.1234"));  // the optional class takes the 1
}

TEST(GbnfTest, AnyCharacterAndEscapes) {
  Matcher m = MatcherFor(R"(root ::= "\x41\u00e9\U0001F600\t" . "\\" "\"")");
  EXPECT_TRUE(m.Matches("A\xC3\xA9\xF0\x9F\x98\x80\t€\\\""));
  EXPECT_FALSE(m.Matches("A\xC3\xA9\xF0\x9F\x98\x80\t\\\""));
}

TEST(GbnfTest, RulesMayBeUsedBeforeTheirDefinition) {
  Matcher m =
      MatcherFor("root ::= greeting \" \" name\nname ::= [A-Z] [a-z]*\ngreeting ::= \"hi\"\n");
  EXPECT_TRUE(m.Matches("hi Ann"));
  EXPECT_FALSE(m.Matches("hi ann"));
}

TEST(GbnfTest, RefusalsNameLineAndColumn) {
  struct Case {
    const char* text;
    const char* message;
  };
  const Case cases[] = {
      {"root ::= item\n", "line 1, column 10: rule 'item' is used but never defined"},
      {"root ::= \"a\"\nroot ::= \"b\"\n", "line 2"},
      {"start ::= \"a\"", "no rule named 'root'"},
      {"root ::= \"abc", "unterminated string literal"},
      {"root ::= [abc", "unterminated character class"},
      {"root ::= (\"a\"", "expected ')'"},
      {"root ::= \"a\" )", "unbalanced ')'"},
      {"root ::= \"a\"{2000}", "above the limit of 1000"},
      {"root ::= \"a\"{3,1}", "n < m"},
      {"root ::= <[1000]>", "token references"},
      {"root ::= [z-a]", "out of order"},
      {"root = \"a\"", "expected '::='"},
      {"root ::= \"\\q\"", "unknown escape"},
  };
  for (const Case& c : cases) {
    auto grammar = ParseGbnf(c.text);
    ASSERT_FALSE(grammar.ok()) << c.text;
    EXPECT_EQ(grammar.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(grammar.status().message(), HasSubstr(c.message)) << c.text;
  }
}

TEST(GbnfTest, LeftRecursionIsRefusedWhenCompiled) {
  auto grammar = ParseGbnf("root ::= expr\nexpr ::= expr \"+\" term | term\nterm ::= [0-9]\n");
  ASSERT_TRUE(grammar.ok()) << grammar.status();
  auto compiled = CompiledGrammar::Create(*std::move(grammar));
  ASSERT_FALSE(compiled.ok());
  EXPECT_THAT(compiled.status().message(), HasSubstr("'expr' is left-recursive"));
  // The right-recursive form of the same language is accepted.
  Matcher m = MatcherFor("root ::= term (\"+\" term)*\nterm ::= [0-9]\n");
  EXPECT_TRUE(m.Matches("1+2+3"));
  EXPECT_FALSE(m.Matches("1+"));
}

}  // namespace gbnf_test
}  // namespace kvserve::constraint
