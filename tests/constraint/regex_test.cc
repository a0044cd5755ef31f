// Tests of ParseRegex: agreement with std::regex (ECMAScript) on many strings, Unicode classes,
// and the refusals.
#include "constraint/regex.h"

#include <random>
#include <regex>
#include <string>
#include <vector>

#include "constraint/matcher.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvserve::constraint {
namespace regex_test {

using ::testing::HasSubstr;

Matcher MatcherFor(std::string_view pattern) {
  auto grammar = ParseRegex(pattern);
  EXPECT_TRUE(grammar.ok()) << pattern << ": " << grammar.status();
  auto compiled = CompiledGrammar::Create(*std::move(grammar));
  EXPECT_TRUE(compiled.ok()) << pattern << ": " << compiled.status();
  return Matcher(*compiled);
}

// ASCII patterns whose language std::regex's ECMAScript grammar defines the same way.
const char* const kPatterns[] = {
    "abc",
    "a|b|cd",
    "a*b+c?",
    "(ab)*",
    "(?:a|bc){2,3}",
    "[a-c]+x",
    "[^a]b",
    "\\d{3}-\\d{4}",
    "\\w+@\\w+\\.com",
    "(a|b)*abb",
    "x{0}y",
    "a{2,}",
    "((a|)b)*",
    "[\\d\\s]*!",
    "^ab*$",
    "(a+|b+)*c",
    "[-a]\\-",
    "a.c",
    "\\(\\)\\[\\]\\{\\}\\.\\*",
    "(\\d{2})-(x|y)?",
    "(a*)*b",
    "[^\\d]+",
    "\\D\\W\\S",
    "[a-cx-z]{1,2}?q",
};

// Random strings over an alphabet that exercises every pattern (and some that miss), compared
// whole-string with std::regex_match; also every prefix of a match must stay alive.
TEST(RegexTest, AgreesWithStdRegexOnRandomStrings) {
  const std::string alphabet = "abcxyzq0129-@.!( )[]{}*_\n";
  std::mt19937 rng(1234);
  int total_matched = 0;
  for (const char* pattern : kPatterns) {
    Matcher m = MatcherFor(pattern);
    const std::regex reference(pattern, std::regex::ECMAScript);
    int matched = 0;
    for (int trial = 0; trial < 3000; ++trial) {
      std::string s;
      const int length = static_cast<int>(rng() % 9);
      for (int i = 0; i < length; ++i) s.push_back(alphabet[rng() % alphabet.size()]);
      const bool expected = std::regex_match(s, reference);
      ASSERT_EQ(m.Matches(s), expected) << "pattern " << pattern << " on '" << s << "'";
      if (expected) {
        ++matched;
        MatchState state = m.initial();
        for (char c : s) {
          state = m.Advance(state, static_cast<uint8_t>(c));
          ASSERT_FALSE(state.dead()) << pattern << " on '" << s << "'";
        }
      }
    }
    total_matched += matched;
  }
  // The strings exercise both answers, not only refusals.
  EXPECT_GT(total_matched, 2000);
}

TEST(RegexTest, SpecificStrings) {
  Matcher phone = MatcherFor("\\d{3}-\\d{4}");
  EXPECT_TRUE(phone.Matches("555-1234"));
  EXPECT_FALSE(phone.Matches("555-123"));
  Matcher email = MatcherFor("[a-z]+@[a-z]+\\.(com|org)");
  EXPECT_TRUE(email.Matches("ann@example.org"));
  EXPECT_FALSE(email.Matches("ann@example.net"));
  // Lazy quantifiers describe the same language.
  Matcher named = MatcherFor("(?<year>\\d{2})-(x|y)?");
  EXPECT_TRUE(named.Matches("12-x"));
  EXPECT_FALSE(named.Matches("12-z"));
  Matcher lazy = MatcherFor("a+?b*?");
  EXPECT_TRUE(lazy.Matches("aab"));
}

TEST(RegexTest, UnicodeAtomsAndClasses) {
  Matcher greek = MatcherFor("[α-ω]+");
  EXPECT_TRUE(greek.Matches("λόγος") == false);  // ό (U+03CC) is outside α-ω
  EXPECT_TRUE(greek.Matches("λογος"));
  EXPECT_FALSE(greek.Matches("logos"));
  Matcher dot = MatcherFor("a.b");
  EXPECT_TRUE(dot.Matches("a€b"));
  EXPECT_TRUE(dot.Matches("a😀b"));
  EXPECT_FALSE(dot.Matches("a\nb"));
  EXPECT_FALSE(
      dot.Matches("a\xE2\x80\xA8"
                  "b"));  // U+2028
  Matcher not_a = MatcherFor("[^a]");
  EXPECT_TRUE(not_a.Matches("é"));
  EXPECT_TRUE(not_a.Matches("\n"));
  EXPECT_FALSE(not_a.Matches("a"));
  Matcher escapes = MatcherFor("\\u00e9\\x41\\u{1F600}");
  EXPECT_TRUE(escapes.Matches("éA😀"));
  Matcher space = MatcherFor("\\s");
  EXPECT_TRUE(space.Matches("\xC2\xA0"));  // U+00A0 is ECMAScript white space
}

TEST(RegexTest, RefusalsNameTheColumn) {
  struct Case {
    const char* pattern;
    const char* message;
  };
  const Case cases[] = {
      {"(a", "expected ')'"},
      {"a)", "unbalanced ')'"},
      {"(a)\\1", "backreferences"},
      {"(?=a)b", "lookaround"},
      {"a\\bc", "word boundaries"},
      {"a^b", "'^' is only supported at the start"},
      {"a$b", "'$' is only supported at the end"},
      {"*a", "quantifier without an atom"},
      {"a**", "nothing to repeat"},
      {"a{3,2}", "out of order"},
      {"a{1001}", "above the limit of 1000"},
      {"[z-a]", "out of order"},
      {"[abc", "unterminated character class"},
      {"\\q", "unsupported escape"},
      {"\\x4", "hexadecimal digits"},
  };
  for (const Case& c : cases) {
    auto grammar = ParseRegex(c.pattern);
    ASSERT_FALSE(grammar.ok()) << c.pattern;
    EXPECT_EQ(grammar.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(grammar.status().message(), HasSubstr(c.message)) << c.pattern;
    EXPECT_THAT(grammar.status().message(), HasSubstr("column ")) << c.pattern;
  }
}

}  // namespace regex_test
}  // namespace kvserve::constraint
