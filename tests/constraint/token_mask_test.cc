// Tests of TokenTrie and ComputeTokenMask against brute force: a token is allowed exactly when
// its bytes keep the output a prefix of some string of the language.
#include "constraint/token_mask.h"

#include <random>
#include <string>
#include <vector>

#include "constraint/constraint.h"
#include "constraint/json_schema.h"
#include "gtest/gtest.h"

namespace kvserve::constraint {
namespace token_mask_test {

// Every string of up to three bytes over a small alphabet, a few longer ones, empty (special)
// tokens, and duplicates (two ids with the same bytes).
std::vector<std::string> SmallVocabulary() {
  const std::string alphabet = "ab{}\":, 1";
  std::vector<std::string> vocab = {"", "<eos>-placeholder"};
  vocab[1] = "";  // a special token: decodes to no bytes
  for (char x : alphabet) {
    vocab.push_back(std::string(1, x));
    for (char y : alphabet) {
      vocab.push_back(std::string{x, y});
      for (char z : std::string("ab\"}")) vocab.push_back(std::string{x, y, z});
    }
  }
  for (const char* s : {"{\"a\":", "true", "{\"", "\":1}", "aaaa", "abab", "é", "\xC3"}) {
    vocab.push_back(s);
  }
  vocab.push_back("ab");  // a duplicate of an earlier id's bytes
  return vocab;
}

// Brute force over a finite language: bytes are allowed after `prefix` when some string of the
// language starts with prefix + bytes.
bool LanguageAllows(const std::vector<std::string>& language, const std::string& text) {
  for (const std::string& s : language) {
    if (s.compare(0, text.size(), text) == 0 && s.size() >= text.size()) return true;
  }
  return false;
}

TEST(TokenMaskTest, ChoiceMasksEqualTheLanguageByBruteForce) {
  const std::vector<std::string> language = {"ab", "abab", "{\"a\":1}", "{\"b\":\"ab\"}", "b a"};
  ConstraintSpec spec;
  spec.kind = ConstraintSpec::Kind::kChoice;
  spec.choices = language;
  auto compiled = CompileConstraint(spec);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  Matcher m(*compiled);
  const std::vector<std::string> vocab = SmallVocabulary();
  const TokenTrie trie(vocab);
  const int32_t eos = 1;
  std::mt19937 rng(7);
  for (int walk = 0; walk < 40; ++walk) {
    std::string text;
    MatchState state = m.initial();
    for (int step = 0; step < 10; ++step) {
      const TokenBitmask mask = ComputeTokenMask(m, state, trie, {eos});
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < static_cast<int32_t>(vocab.size()); ++id) {
        const bool expected =
            id == eos ? std::find(language.begin(), language.end(), text) != language.end()
                      : !vocab[id].empty() && LanguageAllows(language, text + vocab[id]);
        ASSERT_EQ(MaskAllows(mask, id), expected)
            << "after '" << text << "', token " << id << " '" << vocab[id] << "'";
        if (expected) allowed.push_back(id);
      }
      ASSERT_FALSE(allowed.empty()) << "after '" << text << "'";
      const int32_t pick = allowed[rng() % allowed.size()];
      if (pick == eos) break;
      text += vocab[pick];
      state = m.AdvanceAll(state, vocab[pick]);
      ASSERT_FALSE(state.dead());
    }
  }
}

TEST(TokenMaskTest, RegexMasksEqualTheMatcherTokenByToken) {
  ConstraintSpec spec;
  spec.kind = ConstraintSpec::Kind::kRegex;
  spec.text = "(ab|b)*\\{\"[ab]+\":1\\}";
  auto compiled = CompileConstraint(spec);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  Matcher m(*compiled);
  const std::vector<std::string> vocab = SmallVocabulary();
  const TokenTrie trie(vocab);
  std::mt19937 rng(11);
  for (int walk = 0; walk < 30; ++walk) {
    MatchState state = m.initial();
    for (int step = 0; step < 12 && !state.finished(); ++step) {
      const TokenBitmask mask = ComputeTokenMask(m, state, trie, {});
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < static_cast<int32_t>(vocab.size()); ++id) {
        const bool expected = !vocab[id].empty() && m.Allows(state, vocab[id]);
        ASSERT_EQ(MaskAllows(mask, id), expected) << "token '" << vocab[id] << "'";
        if (expected) allowed.push_back(id);
      }
      ASSERT_FALSE(allowed.empty());
      state = m.AdvanceAll(state, vocab[allowed[rng() % allowed.size()]]);
    }
  }
}

TEST(TokenMaskTest, TrieHoldsEveryNonEmptyTokenOnce) {
  const std::vector<std::string> vocab = SmallVocabulary();
  const TokenTrie trie(vocab);
  std::vector<int> seen(vocab.size(), 0);
  for (int32_t id : trie.token_ids()) ++seen[id];
  for (size_t id = 0; id < vocab.size(); ++id) EXPECT_EQ(seen[id], vocab[id].empty() ? 0 : 1);
  // Depth-first layout: each subtree ends after its last node.
  const auto& nodes = trie.nodes();
  for (size_t i = 0; i < nodes.size(); ++i) {
    ASSERT_GT(nodes[i].subtree_end, static_cast<int32_t>(i));
    for (int32_t j = static_cast<int32_t>(i) + 1; j < nodes[i].subtree_end; ++j) {
      ASSERT_GT(nodes[j].depth, nodes[i].depth);
    }
  }
}

}  // namespace token_mask_test
}  // namespace kvserve::constraint

namespace kvserve::constraint {
namespace token_mask_test {

TEST(TokenMaskTest, CacheAnswersARepeatedStateWithTheSameMask) {
  ConstraintSpec spec;
  spec.kind = ConstraintSpec::Kind::kRegex;
  spec.text = "\"[ab]*\"";
  auto compiled = CompileConstraint(spec);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  Matcher m(*compiled);
  const TokenTrie trie(SmallVocabulary());
  MaskCache cache(/*max_entries=*/2);
  const MatchState open = m.Advance(m.initial(), '"');
  const MatchState after_a = m.Advance(open, 'a');  // the same parses as `open`
  EXPECT_EQ(cache.Get(m, open, trie, {1}), ComputeTokenMask(m, open, trie, {1}));
  EXPECT_EQ(cache.Get(m, after_a, trie, {1}), ComputeTokenMask(m, after_a, trie, {1}));
  EXPECT_EQ(cache.misses(), 1);
  EXPECT_EQ(cache.hits(), 1);
  // Past its bound it starts over, and still answers right.
  const MatchState closed = m.Advance(open, '"');
  EXPECT_EQ(cache.Get(m, m.initial(), trie, {1}), ComputeTokenMask(m, m.initial(), trie, {1}));
  EXPECT_EQ(cache.Get(m, closed, trie, {1}), ComputeTokenMask(m, closed, trie, {1}));
  EXPECT_EQ(cache.misses(), 3);
}

}  // namespace token_mask_test
}  // namespace kvserve::constraint

namespace kvserve::constraint {
namespace token_mask_test {

// The memoised walk (Matcher::Successors, per-depth buffers, byte-set filter) against the plain
// definition, token by token (AdvanceAll not dead), on random states of every constraint kind,
// including JSON Schema; the same matcher is reused so that memoised successors are exercised.
TEST(TokenMaskTest, WalkedMaskEqualsPerTokenAdvanceOnRandomStatesOfEveryKind) {
  std::vector<std::shared_ptr<const CompiledGrammar>> grammars;
  ConstraintSpec regex;
  regex.kind = ConstraintSpec::Kind::kRegex;
  regex.text = "(ab|b)*\\{\"[ab ]+\":1\\}";
  ConstraintSpec gbnf;
  gbnf.kind = ConstraintSpec::Kind::kGrammar;
  gbnf.text =
      "root ::= \"{\" pair (\",\" pair)* \"}\"\npair ::= \"\\\"\" [ab]+ \"\\\":\" (\"1\" | root)";
  ConstraintSpec choice;
  choice.kind = ConstraintSpec::Kind::kChoice;
  choice.choices = {"ab", "abab", "{\"a\":1}", "b a"};
  for (const ConstraintSpec* spec : {&regex, &gbnf, &choice}) {
    auto compiled = CompileConstraint(*spec);
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    grammars.push_back(*compiled);
  }
  auto schema = JsonSchemaGrammar(
      R"({"type":"object","properties":{"a":{"type":"string"},"b":{"type":"array","items":{"type":"integer"}}},"required":["a"]})");
  ASSERT_TRUE(schema.ok()) << schema.status();
  auto compiled = CompiledGrammar::Create(*std::move(schema));
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  grammars.push_back(*compiled);
  const std::vector<std::string> vocab = SmallVocabulary();
  const TokenTrie trie(vocab);
  std::mt19937 rng(3);
  for (const auto& grammar : grammars) {
    Matcher m(grammar);
    for (int walk = 0; walk < 20; ++walk) {
      MatchState state = m.initial();
      for (int step = 0; step < 15 && !state.finished(); ++step) {
        const TokenBitmask mask = ComputeTokenMask(m, state, trie, {1});
        std::vector<int32_t> allowed;
        for (int32_t id = 0; id < static_cast<int32_t>(vocab.size()); ++id) {
          const bool expected = id == 1
                                    ? state.accepting
                                    : !vocab[id].empty() && !m.AdvanceAll(state, vocab[id]).dead();
          ASSERT_EQ(MaskAllows(mask, id), expected) << "token '" << vocab[id] << "'";
          if (expected && id != 1) allowed.push_back(id);
        }
        if (allowed.empty()) break;
        state = m.AdvanceAll(state, vocab[allowed[rng() % allowed.size()]]);
      }
    }
  }
}

}  // namespace token_mask_test
}  // namespace kvserve::constraint
