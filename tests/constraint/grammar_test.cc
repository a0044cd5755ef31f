// Tests of Grammar validation, the builder's expansions and the matcher over hand-built grammars.
#include "constraint/grammar.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "constraint/matcher.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvserve::constraint {
namespace grammar_test {

using ::testing::HasSubstr;

std::shared_ptr<const CompiledGrammar> Compile(Grammar g) {
  auto compiled = CompiledGrammar::Create(std::move(g));
  EXPECT_TRUE(compiled.ok()) << compiled.status();
  return compiled.ok() ? *compiled : nullptr;
}

TEST(GrammarTest, LiteralAlternativesMatchWholeStringsOnly) {
  GrammarBuilder b;
  const int32_t root = b.AddRule("root");
  b.AddAlternative(root, b.Literal("yes"));
  b.AddAlternative(root, b.Literal("no"));
  Matcher m(Compile(std::move(b).Build(root)));
  EXPECT_TRUE(m.Matches("yes"));
  EXPECT_TRUE(m.Matches("no"));
  EXPECT_FALSE(m.Matches("ye"));
  EXPECT_FALSE(m.Matches("yess"));
  EXPECT_FALSE(m.Matches(""));
  const MatchState ye = m.AdvanceAll(m.initial(), "ye");
  EXPECT_FALSE(ye.dead());
  EXPECT_FALSE(ye.accepting);
  const MatchState yes = m.Advance(ye, 's');
  EXPECT_TRUE(yes.accepting);
  EXPECT_TRUE(yes.finished());
  EXPECT_TRUE(m.Advance(ye, 'x').dead());
  const ByteSet next = m.NextBytes(m.initial());
  EXPECT_TRUE(next.Has('y'));
  EXPECT_TRUE(next.Has('n'));
  EXPECT_FALSE(next.Has('s'));
}

TEST(GrammarTest, RepeatBoundsAreExact) {
  GrammarBuilder b;
  const int32_t rep = b.Repeat("digits", {b.Bytes(ByteSet::Range('0', '9'))}, 2, 4);
  Matcher m(Compile(std::move(b).Build(rep)));
  EXPECT_FALSE(m.Matches("1"));
  EXPECT_TRUE(m.Matches("12"));
  EXPECT_TRUE(m.Matches("1234"));
  EXPECT_FALSE(m.Matches("12345"));
  EXPECT_FALSE(m.Matches("12a"));
}

TEST(GrammarTest, UnboundedRepetitionKeepsTheArenaBounded) {
  GrammarBuilder b;
  const int32_t rep = b.Repeat("as", {b.Bytes(ByteSet::Single('a'))}, 0, -1);
  Matcher m(Compile(std::move(b).Build(rep)));
  MatchState s = m.initial();
  EXPECT_TRUE(s.accepting);
  for (int i = 0; i < 10000; ++i) s = m.Advance(s, 'a');
  EXPECT_TRUE(s.accepting);
  // A repetition continues at its caller: ten thousand bytes make no deeper stacks.
  EXPECT_LT(m.arena_size(), 16);
}

TEST(GrammarTest, LeftRecursionIsRefusedByName) {
  GrammarBuilder b;
  const int32_t expr = b.AddRule("expr");
  std::vector<Element> seq = {b.RuleRef(expr)};
  std::vector<Element> plus = b.Literal("+1");
  seq.insert(seq.end(), plus.begin(), plus.end());
  b.AddAlternative(expr, seq);
  b.AddAlternative(expr, b.Literal("1"));
  auto compiled = CompiledGrammar::Create(std::move(b).Build(expr));
  ASSERT_FALSE(compiled.ok());
  EXPECT_EQ(compiled.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(compiled.status().message(), HasSubstr("'expr' is left-recursive"));
}

TEST(GrammarTest, LeftRecursionThroughAnEmptyRuleIsRefused) {
  GrammarBuilder b;
  const int32_t a = b.AddRule("a");
  const int32_t empty = b.AddRule("maybe");
  b.AddAlternative(empty, {});
  b.AddAlternative(empty, b.Literal("x"));
  b.AddAlternative(a, {b.RuleRef(empty), b.RuleRef(a), b.Bytes(ByteSet::Single('y'))});
  b.AddAlternative(a, b.Literal("z"));
  auto compiled = CompiledGrammar::Create(std::move(b).Build(a));
  ASSERT_FALSE(compiled.ok());
  EXPECT_THAT(compiled.status().message(), HasSubstr("left-recursive"));
}

TEST(GrammarTest, RepetitionOfSomethingEmptyIsAllowedAndTerminates) {
  GrammarBuilder b;
  const int32_t maybe = b.Repeat("maybe_a", {b.Bytes(ByteSet::Single('a'))}, 0, 1);
  const int32_t rep = b.Repeat("many", {b.RuleRef(maybe)}, 0, -1);
  Matcher m(Compile(std::move(b).Build(rep)));
  EXPECT_TRUE(m.Matches(""));
  EXPECT_TRUE(m.Matches("aaaa"));
  EXPECT_FALSE(m.Matches("ab"));
}

TEST(GrammarTest, RuleThatAcceptsNothingIsRefusedByName) {
  GrammarBuilder b;
  const int32_t root = b.AddRule("root");
  const int32_t loop = b.AddRule("loop");
  b.AddAlternative(loop, {b.Bytes(ByteSet::Single('x')), b.RuleRef(loop)});
  b.AddAlternative(root, {b.RuleRef(loop)});
  auto compiled = CompiledGrammar::Create(std::move(b).Build(root));
  ASSERT_FALSE(compiled.ok());
  EXPECT_THAT(compiled.status().message(), HasSubstr("no finite string matches"));
  EXPECT_THAT(compiled.status().message(), HasSubstr("'loop'"));
}

TEST(GrammarTest, LimitsAreEnforced) {
  GrammarBuilder b;
  const int32_t rep = b.Repeat("r", {b.Bytes(ByteSet::Single('a'))}, 0, 50);
  GrammarLimits limits;
  limits.max_rules = 10;
  auto compiled = CompiledGrammar::Create(std::move(b).Build(rep), limits);
  ASSERT_FALSE(compiled.ok());
  EXPECT_THAT(compiled.status().message(), HasSubstr("more than the limit of 10"));
}

// Every code point of a sample (all of the first 0x3000, then strided) is in the class exactly
// when it is in one of the ranges, and matches as its UTF-8 encoding alone.
TEST(GrammarTest, CodePointClassesMatchTheirUtf8Encodings) {
  const std::vector<std::pair<uint32_t, uint32_t>> ranges = {
      {'a', 'f'}, {0xE9, 0x3B1}, {0x7FF, 0x800}, {0xFFFF, 0x10010}, {0x10FF00, 0x10FFFF}};
  for (bool negated : {false, true}) {
    GrammarBuilder b;
    const int32_t cls = b.CodePointClass("cls", ranges, negated);
    Matcher m(Compile(std::move(b).Build(cls)));
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp += cp < 0x3000 ? 1 : 97) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      bool in = false;
      for (const auto& [lo, hi] : ranges) in = in || (cp >= lo && cp <= hi);
      ASSERT_EQ(m.Matches(EncodeUtf8(cp)), in != negated) << "U+" << std::hex << cp;
    }
    for (uint32_t cp : {0x10FFFFu, 0x10FF00u, 0x10000u, 0xFFFFu}) {
      bool in = false;
      for (const auto& [lo, hi] : ranges) in = in || (cp >= lo && cp <= hi);
      EXPECT_EQ(m.Matches(EncodeUtf8(cp)), in != negated) << "U+" << std::hex << cp;
    }
    // A surrogate's (CESU-style) encoding and an overlong encoding are never matched.
    EXPECT_FALSE(m.Matches("\xED\xA0\x80"));
    EXPECT_FALSE(m.Matches("\xC0\xAF"));
  }
}

TEST(GrammarTest, EncodeUtf8) {
  EXPECT_EQ(EncodeUtf8('A'), "A");
  EXPECT_EQ(EncodeUtf8(0xE9), "\xC3\xA9");
  EXPECT_EQ(EncodeUtf8(0x20AC), "\xE2\x82\xAC");
  EXPECT_EQ(EncodeUtf8(0x1F600), "\xF0\x9F\x98\x80");
}

}  // namespace grammar_test
}  // namespace kvserve::constraint
