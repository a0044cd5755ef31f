// Tests for Tokenizer on the tiny byte-level BPE tokenizer and small hand-written tokenizer.json
// files (SentencePiece-style byte fallback, added tokens, normalizers, error cases).
#include "model/tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "model/tiny_tokenizer.h"

namespace kvserve::model {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::unique_ptr<Tokenizer> Tiny(int32_t vocab = 32000) {
  auto t = Tokenizer::FromJson(MakeTinyTokenizerJson(vocab), MakeTinyTokenizerConfigJson());
  EXPECT_TRUE(t.ok()) << t.status();
  return *std::move(t);
}

TEST(TinyTokenizerTest, SpecialTokenIdsAndVocabSize) {
  auto t = Tiny();
  EXPECT_EQ(t->bos_token_id(), kTinyBosId);
  EXPECT_THAT(t->eos_token_ids(), ElementsAre(kTinyEosId));
  EXPECT_GT(t->vocab_size(), 258);
  auto small = Tiny(258);
  EXPECT_EQ(small->vocab_size(), 258);  // no room for merges
}

TEST(TinyTokenizerTest, BytesAreIdsWithoutMerges) {
  auto t = Tiny(258);
  auto ids = t->Encode("Hi!", false);
  ASSERT_TRUE(ids.ok());
  EXPECT_THAT(*ids, ElementsAre('H', 'i', '!'));
  // é is two UTF-8 bytes, each its own symbol.
  ids = t->Encode("\xC3\xA9", true);
  ASSERT_TRUE(ids.ok());
  EXPECT_THAT(*ids, ElementsAre(kTinyBosId, 0xC3, 0xA9));
}

TEST(TinyTokenizerTest, MergesApplyInRankOrder) {
  auto t = Tiny();
  auto the = t->TokenToId("\xC4\xA0the");  // "Ġthe"
  auto hello = t->TokenToId("Hello");
  auto world = t->TokenToId("\xC4\xA0world");
  ASSERT_TRUE(the && hello && world);
  auto ids = t->Encode("Hello world the", false);
  ASSERT_TRUE(ids.ok());
  EXPECT_THAT(*ids, ElementsAre(*hello, *world, *the));
  EXPECT_EQ(t->Decode(*ids, false), "Hello world the");
}

TEST(TinyTokenizerTest, AddedTokensInsideTextAndDecodeSkipping) {
  auto t = Tiny();
  auto ids = t->Encode("a</s>b<s>", false);
  ASSERT_TRUE(ids.ok());
  EXPECT_THAT(*ids, ElementsAre('a', kTinyEosId, 'b', kTinyBosId));
  EXPECT_EQ(t->Decode(*ids, false), "a</s>b<s>");
  EXPECT_EQ(t->Decode(*ids, true), "ab");
}

TEST(TinyTokenizerTest, RoundTripsArbitraryUtf8AndIgnoresUnknownIds) {
  auto t = Tiny();
  const std::string text = "  Tabs\tand\nnewlines, 12345 digits, 日本語, emoji \xF0\x9F\x98\x80!";
  auto ids = t->Encode(text, true);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->front(), kTinyBosId);
  EXPECT_EQ(t->Decode(*ids, true), text);
  std::vector<int32_t> with_unknown = *ids;
  with_unknown.push_back(31999);  // beyond the tokenizer's vocab: decodes to nothing
  EXPECT_EQ(t->Decode(with_unknown, true), text);
}

TEST(TinyTokenizerTest, RejectsInvalidUtf8) {
  auto t = Tiny();
  auto ids = t->Encode("bad \xFF byte", false);
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TinyTokenizerTest, ChatTemplateRendersAndEncodes) {
  auto t = Tiny();
  auto rendered = t->ApplyChatTemplate({{"system", " Be brief. "}, {"user", "Hi"}}, true);
  ASSERT_TRUE(rendered.ok()) << rendered.status();
  EXPECT_EQ(*rendered, "<s><|system|>\n\nBe brief.</s><|user|>\n\nHi</s><|assistant|>\n\n");
  auto ids = t->Encode(*rendered, false);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->front(), kTinyBosId);
  EXPECT_EQ(std::count(ids->begin(), ids->end(), kTinyEosId), 2);
}

TEST(TokenizerTest, FromDirectoryReadsBothFiles) {
  const auto dir = std::filesystem::temp_directory_path() / "kvserve_tokenizer_test_dir";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << MakeTinyTokenizerJson(400);
  std::ofstream(dir / "tokenizer_config.json") << MakeTinyTokenizerConfigJson();
  auto t = Tokenizer::FromDirectory(dir.string());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->bos_token_id(), kTinyBosId);
  EXPECT_TRUE((*t)->ApplyChatTemplate({{"user", "x"}}, false).ok());
  std::filesystem::remove(dir / "tokenizer_config.json");
  t = Tokenizer::FromDirectory(dir.string());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->ApplyChatTemplate({{"user", "x"}}, false).status().code(),
            absl::StatusCode::kFailedPrecondition);
  std::filesystem::remove_all(dir);
  EXPECT_EQ(Tokenizer::FromDirectory(dir.string()).status().code(), absl::StatusCode::kNotFound);
}

// A SentencePiece-style (Llama-2-like) tokenizer.json with byte fallback.
std::string SentencePieceJson() {
  nlohmann::json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) {
    static constexpr char kHex[] = "0123456789ABCDEF";
    vocab[std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">"] = 3 + b;
  }
  int next = 259;
  for (const char* piece :
       {"\xE2\x96\x81", "h", "e", "l", "o", "w", "r", "d", "he", "ll", "\xE2\x96\x81h",
        "\xE2\x96\x81he", "llo", "\xE2\x96\x81hello", "\xE2\x96\x81w"}) {
    vocab[piece] = next++;
  }
  nlohmann::json tokenizer = {
      {"added_tokens",
       {{{"id", 0}, {"content", "<unk>"}, {"special", true}, {"normalized", false}},
        {{"id", 1}, {"content", "<s>"}, {"special", true}, {"normalized", false}},
        {{"id", 2}, {"content", "</s>"}, {"special", true}, {"normalized", false}}}},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         {{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
          {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}}}}},
      {"pre_tokenizer", nullptr},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single",
         {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
          {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         {{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
          {{"type", "ByteFallback"}},
          {{"type", "Fuse"}},
          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
      {"model",
       {{"type", "BPE"},
        {"unk_token", "<unk>"},
        {"fuse_unk", true},
        {"byte_fallback", true},
        {"vocab", vocab},
        {"merges",
         {"\xE2\x96\x81 h", "\xE2\x96\x81h e", "l l", "ll o", "\xE2\x96\x81he llo",
          "\xE2\x96\x81 w", "h e"}}}}};
  return tokenizer.dump();
}

TEST(SentencePieceStyleTest, PrependsMetaspaceMergesAndFallsBackToBytes) {
  auto t = Tokenizer::FromJson(SentencePieceJson(), "");
  ASSERT_TRUE(t.ok()) << t.status();
  const int32_t hello = *(*t)->TokenToId("\xE2\x96\x81hello");
  const int32_t w = *(*t)->TokenToId("\xE2\x96\x81w");
  auto ids = (*t)->Encode("hello w\xC3\xA9", true);
  ASSERT_TRUE(ids.ok());
  // é is not in the vocab: its two bytes become <0xC3> <0xA9> (ids 3 + byte).
  EXPECT_THAT(*ids, ElementsAre(1, hello, w, 3 + 0xC3, 3 + 0xA9));
  EXPECT_EQ((*t)->Decode(*ids, true), "hello w\xC3\xA9");
  EXPECT_EQ((*t)->Decode(*ids, false), "<s> hello w\xC3\xA9");
  EXPECT_EQ((*t)->bos_token_id(), 1);  // from the post-processor: no tokenizer_config.json
  // "x" is not in the vocab (byte fallback), so "▁ h" cannot apply and "h e" merges.
  EXPECT_THAT(*(*t)->Encode("xhe", false),
              ElementsAre(*(*t)->TokenToId("\xE2\x96\x81"), 3 + 'x', *(*t)->TokenToId("he")));
  // Invalid byte runs decode lossily: one replacement character per maximal invalid subpart.
  EXPECT_EQ((*t)->Decode(std::vector<int32_t>{3 + 0xE2, 3 + 0x82}, true), "\xEF\xBF\xBD");
  EXPECT_EQ((*t)->Decode(std::vector<int32_t>{3 + 'a', 3 + 0xFF, 3 + 'b'}, true),
            "a\xEF\xBF\xBD"
            "b");
}

TEST(TokenizerErrorsTest, NamesTheProblem) {
  auto expect_error = [](const std::string& json, const std::string& needle) {
    auto t = Tokenizer::FromJson(json, "");
    ASSERT_FALSE(t.ok()) << "accepted: " << json.substr(0, 200);
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(t.status().message()), HasSubstr(needle));
  };
  expect_error("{not json", "not valid JSON");
  expect_error("{}", "no 'model'");
  expect_error(R"({"model": {"type": "Unigram", "vocab": []}})",
               "unsupported model type 'Unigram'");
  expect_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}})",
               "missing from the vocab");
  nlohmann::json tiny = nlohmann::json::parse(MakeTinyTokenizerJson(300));
  tiny["normalizer"] = {{"type", "BertNormalizer"}};
  expect_error(tiny.dump(), "unsupported normalizer type 'BertNormalizer'");
  tiny["normalizer"] = nullptr;
  tiny["pre_tokenizer"] = {{"type", "Punctuation"}};
  expect_error(tiny.dump(), "unsupported pre_tokenizer type 'Punctuation'");
  tiny["pre_tokenizer"] = {
      {"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  expect_error(tiny.dump(), "does not compile");
  tiny["pre_tokenizer"] = nullptr;
  tiny["decoder"] = {{"type", "CTC"}};
  expect_error(tiny.dump(), "unsupported decoder type 'CTC'");
  tiny["decoder"] = nullptr;
  tiny["post_processor"] = {{"type", "Fancy"}};
  expect_error(tiny.dump(), "unsupported post_processor type 'Fancy'");
}

TEST(TokenizerErrorsTest, BadChatTemplateIsReportedWhenRendering) {
  nlohmann::json config = nlohmann::json::parse(MakeTinyTokenizerConfigJson());
  config["chat_template"] = "{% include 'other.jinja' %}";
  auto t = Tokenizer::FromJson(MakeTinyTokenizerJson(300), config.dump());
  ASSERT_TRUE(t.ok()) << t.status();
  auto rendered = (*t)->ApplyChatTemplate({{"user", "x"}}, true);
  EXPECT_EQ(rendered.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(rendered.status().message()),
              HasSubstr("unsupported statement 'include'"));
}

TEST(TokenizerTest, CleanUpTokenizationMatchesTransformers) {
  EXPECT_EQ(Tokenizer::CleanUpTokenization("Hi , you ! do n't it 's . ok ?"),
            "Hi, you! don't it's. ok?");
}

}  // namespace
}  // namespace kvserve::model
