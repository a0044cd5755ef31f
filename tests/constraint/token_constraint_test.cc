// Tests of ConstraintCompiler (its cache and errors) and SequenceConstraint (masks on logits,
// rows forked and dropped, forced tokens for jump-forward).
#include "constraint/token_constraint.h"

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvserve::constraint {
namespace token_constraint_test {

using ::testing::HasSubstr;

constexpr int32_t kEos = 0;

// Id 0 is EOS (no bytes); single characters, a few words, and JSON pieces.
std::shared_ptr<const ConstraintVocabulary> Vocabulary(int64_t model_vocab = 0) {
  std::vector<std::string> bytes = {""};
  for (char c : std::string("abcdefghijklmnopqrstuvwxyz0123456789{}[]\":,. -")) {
    bytes.push_back(std::string(1, c));
  }
  for (const char* s : {"{\"", "name", "\":\"", "\",\"", "age", "\":", "}", "yes", "no", "ye",
                        "\"}", "true", "false"}) {
    bytes.push_back(s);
  }
  const int64_t width = std::max<int64_t>(model_vocab, static_cast<int64_t>(bytes.size()));
  return std::make_shared<const ConstraintVocabulary>(std::move(bytes), std::vector<int32_t>{kEos},
                                                      width);
}

ConstraintSpec Choice(std::vector<std::string> choices) {
  ConstraintSpec spec;
  spec.kind = ConstraintSpec::Kind::kChoice;
  spec.choices = std::move(choices);
  return spec;
}

ConstraintSpec Schema(std::string text) {
  ConstraintSpec spec;
  spec.kind = ConstraintSpec::Kind::kJsonSchema;
  spec.text = std::move(text);
  return spec;
}

std::string Spell(const ConstraintVocabulary& v, const std::vector<int32_t>& tokens) {
  std::string out;
  for (int32_t t : tokens) out += v.token_bytes()[t];
  return out;
}

TEST(ConstraintCompilerTest, TheSameSpecIsCompiledOnceAndTheCacheIsBounded) {
  ConstraintCompilerOptions options;
  options.cache_entries = 2;
  ConstraintCompiler compiler(Vocabulary(), options);
  auto a = compiler.Compile(Choice({"yes", "no"}));
  ASSERT_TRUE(a.ok()) << a.status();
  auto again = compiler.Compile(Choice({"yes", "no"}));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(a->get(), again->get());
  EXPECT_EQ(compiler.stats().hits, 1);
  // Texts that concatenate alike are different keys.
  auto b = compiler.Compile(Choice({"ye", "sno"}));
  ASSERT_TRUE(b.ok());
  EXPECT_NE(a->get(), b->get());
  ASSERT_TRUE(compiler.Compile(Schema(R"({"type":"boolean"})")).ok());
  EXPECT_EQ(compiler.stats().entries, 2);
  // The first one left the cache: compiled anew.
  auto third = compiler.Compile(Choice({"yes", "no"}));
  ASSERT_TRUE(third.ok());
  EXPECT_NE(a->get(), third->get());
}

TEST(ConstraintCompilerTest, ErrorsNameThePointerAndAreNotCached) {
  ConstraintCompiler compiler(Vocabulary());
  auto bad = compiler.Compile(Schema(R"({"type":"object","properties":{"a":{"minimum":"x"}}})"));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("/properties/a"));
  EXPECT_EQ(compiler.stats().entries, 0);
  ConstraintSpec regex;
  regex.kind = ConstraintSpec::Kind::kRegex;
  regex.text = "(ab";
  EXPECT_EQ(compiler.Compile(regex).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ConstraintCompilerTest, NoTokenizerIsAFailedPrecondition) {
  ConstraintCompiler compiler(nullptr, {kEos}, 100);
  EXPECT_EQ(compiler.Compile(Choice({"a"})).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(SequenceConstraintTest, MaskedLogitsKeepExactlyTheAllowedTokens) {
  auto vocab = Vocabulary(/*model_vocab=*/128);  // wider than the tokenizer: padding ids
  ConstraintCompiler compiler(vocab);
  auto compiled = compiler.Compile(Choice({"yes", "no"}));
  ASSERT_TRUE(compiled.ok());
  SequenceConstraint sc(*compiled);
  std::vector<float> logits(128, 1.0f);
  ASSERT_TRUE(sc.ApplyMask(0, absl::MakeSpan(logits)));
  std::string allowed;
  for (size_t id = 0; id < logits.size(); ++id) {
    if (std::isfinite(logits[id])) {
      ASSERT_LT(id, vocab->token_bytes().size());
      allowed += "[" + vocab->token_bytes()[id] + "]";
    }
  }
  // "y", "n", "yes", "no", "ye"; never EOS (nothing accepted yet), never the padding ids.
  EXPECT_EQ(allowed, "[n][y][yes][no][ye]");
}

TEST(SequenceConstraintTest, EndIsAllowedOnlyWhereTheValueIsCompleteAndFinishedEnds) {
  ConstraintCompiler compiler(Vocabulary());
  auto compiled = compiler.Compile(Choice({"ye", "yes"}));
  ASSERT_TRUE(compiled.ok());
  SequenceConstraint sc(*compiled);
  const auto& v = *(*compiled)->vocabulary;
  auto id_of = [&](const std::string& s) {
    for (size_t i = 0; i < v.token_bytes().size(); ++i) {
      if (v.token_bytes()[i] == s) return static_cast<int32_t>(i);
    }
    return int32_t{-1};
  };
  EXPECT_FALSE(MaskAllows(sc.Mask(0), kEos));
  ASSERT_TRUE(sc.Accept(0, id_of("ye")));
  EXPECT_TRUE(sc.Accepting(0));
  EXPECT_FALSE(sc.Finished(0));
  EXPECT_TRUE(MaskAllows(sc.Mask(0), kEos));
  EXPECT_TRUE(MaskAllows(sc.Mask(0), id_of("s")));
  ASSERT_TRUE(sc.Accept(0, id_of("s")));
  EXPECT_TRUE(sc.Finished(0));
  // Only EOS remains.
  int allowed = 0;
  for (int32_t id = 0; id < static_cast<int32_t>(v.token_bytes().size()); ++id) {
    allowed += MaskAllows(sc.Mask(0), id);
  }
  EXPECT_EQ(allowed, 1);
  EXPECT_TRUE(sc.Accept(0, kEos));
  // A token the mask did not allow kills the row; a dead row allows nothing.
  EXPECT_FALSE(sc.Accept(0, id_of("a")));
  EXPECT_TRUE(sc.Dead(0));
  std::vector<float> logits(v.model_vocab(), 0.0f);
  EXPECT_FALSE(sc.ApplyMask(0, absl::MakeSpan(logits)));
}

TEST(SequenceConstraintTest, RowsForkReorderAndFinishIndependently) {
  ConstraintCompiler compiler(Vocabulary());
  auto compiled = compiler.Compile(Choice({"yes", "no"}));
  ASSERT_TRUE(compiled.ok());
  const auto& v = *(*compiled)->vocabulary;
  auto id_of = [&](const std::string& s) {
    for (size_t i = 0; i < v.token_bytes().size(); ++i) {
      if (v.token_bytes()[i] == s) return static_cast<int32_t>(i);
    }
    return int32_t{-1};
  };
  SequenceConstraint sc(*compiled);
  const std::vector<int64_t> fan_out = {0, 0, 0};
  sc.Reorder(fan_out);
  ASSERT_EQ(sc.rows(), 3);
  ASSERT_TRUE(sc.Accept(0, id_of("y")));
  ASSERT_TRUE(sc.Accept(1, id_of("n")));
  ASSERT_TRUE(sc.Accept(2, id_of("ye")));
  EXPECT_TRUE(MaskAllows(sc.Mask(0), id_of("e")));
  EXPECT_FALSE(MaskAllows(sc.Mask(0), id_of("o")));
  EXPECT_TRUE(MaskAllows(sc.Mask(1), id_of("o")));
  EXPECT_TRUE(MaskAllows(sc.Mask(2), id_of("s")));
  // Beams: new row 0 continues old row 2, new row 1 old row 1, new row 2 old row 2.
  const std::vector<int64_t> parents = {2, 1, 2};
  sc.Reorder(parents);
  EXPECT_TRUE(MaskAllows(sc.Mask(0), id_of("s")));
  EXPECT_TRUE(MaskAllows(sc.Mask(1), id_of("o")));
  ASSERT_TRUE(sc.Accept(1, id_of("o")));
  EXPECT_TRUE(sc.Finished(1));
  // Rows are independent: row 1 finishing leaves row 0 where it was.
  EXPECT_FALSE(sc.Finished(0));
  EXPECT_TRUE(MaskAllows(sc.Mask(0), id_of("s")));
}

TEST(SequenceConstraintTest, ForcedTokensSpellTheOnlyContinuationAndLeaveTheBoundary) {
  ConstraintCompiler compiler(Vocabulary());
  auto compiled = compiler.Compile(Schema(
      R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},"required":["name","age"],"additionalProperties":false})"));
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  const auto& v = *(*compiled)->vocabulary;
  SequenceConstraint sc(*compiled);
  // `{"name":"` is forced; its last token ends where the string's content begins, so it is
  // left to sampling (a token such as `":"` could have merged with the content).
  std::vector<int32_t> forced = sc.ForcedTokens(0, 16);
  ASSERT_FALSE(forced.empty());
  const std::string spelled = Spell(v, forced);
  EXPECT_EQ(std::string("{\"name\":\"").compare(0, spelled.size(), spelled), 0) << spelled;
  EXPECT_LT(spelled.size(), std::string("{\"name\":\"").size());
  for (int32_t t : forced) ASSERT_TRUE(sc.Accept(0, t));
  // Inside the string's content nothing is forced.
  std::vector<int32_t> rest = sc.ForcedTokens(0, 16);
  for (int32_t t : rest) ASSERT_TRUE(sc.Accept(0, t));
  EXPECT_TRUE(sc.ForcedTokens(0, 16).empty());
  EXPECT_LE(sc.ForcedTokens(0, 1).size(), 1u);
}

TEST(SequenceConstraintTest, RandomMaskedWalksOnlyProduceValidValues) {
  ConstraintCompiler compiler(Vocabulary());
  auto compiled = compiler.Compile(Schema(
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":5},"ok":{"type":"boolean"}},"required":["name","ok"],"additionalProperties":false})"));
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  const auto& v = *(*compiled)->vocabulary;
  Matcher check((*compiled)->grammar);
  std::mt19937 rng(3);
  int completed = 0;
  for (int walk = 0; walk < 50; ++walk) {
    SequenceConstraint sc(*compiled);
    std::string text;
    for (int step = 0; step < 60; ++step) {
      std::vector<float> logits(v.model_vocab());
      for (float& x : logits) x = std::uniform_real_distribution<float>(0, 1)(rng);
      ASSERT_TRUE(sc.ApplyMask(0, absl::MakeSpan(logits)));
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < static_cast<int32_t>(logits.size()); ++id) {
        if (std::isfinite(logits[id])) allowed.push_back(id);
      }
      const int32_t token = allowed[rng() % allowed.size()];
      ASSERT_TRUE(sc.Accept(0, token));
      if (token == kEos) break;
      text += v.token_bytes()[token];
    }
    if (sc.Accepting(0)) {
      ++completed;
      EXPECT_TRUE(check.Matches(text)) << text;
    }
  }
  EXPECT_GT(completed, 0);
}

}  // namespace token_constraint_test
}  // namespace kvserve::constraint
