// Tests for Tokenizer on the tiny byte-level BPE tokenizer and small hand-written tokenizer.json
// files (SentencePiece-style byte fallback, added tokens, normalizers, error cases).
#include "tokenizer/tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tokenizer/tiny_tokenizer.h"

namespace kvserve::tokenizer {
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

// Past the merges, whole words fill every id below the hint, so a model of that vocabulary
// samples nothing that decodes to nothing; no merge makes them, so text encodes as before.
TEST(TinyTokenizerTest, WordsFillTheVocabularyWithoutChangingEncodings) {
  for (int32_t vocab : {320, 512, 4000}) {
    auto t = Tiny(vocab);
    EXPECT_EQ(t->vocab_size(), vocab);
    for (int32_t id = 0; id < vocab; ++id) {
      if (id == kTinyBosId || id == kTinyEosId) continue;
      EXPECT_TRUE(t->IdToToken(id).has_value()) << "vocab " << vocab << ", id " << id;
      EXPECT_FALSE(t->Decode(std::vector<int32_t>{id}, true).empty())
          << "vocab " << vocab << ", id " << id;
    }
  }
  auto t = Tiny(512);
  const std::optional<int32_t> time = t->TokenToId("\xC4\xA0time");  // " time", the first word
  ASSERT_TRUE(time.has_value());
  EXPECT_EQ(t->Decode(std::vector<int32_t>{*time}, true), " time");
  const std::string text = "Hello world, the time people ba be bababa";
  auto ids = t->Encode(text, false);
  ASSERT_TRUE(ids.ok());
  for (int32_t id : *ids) EXPECT_LT(id, *time) << text;
  EXPECT_EQ(*ids, *Tiny(32000)->Encode(text, false));
  EXPECT_EQ(t->Decode(*ids, false), text);
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
  // Beyond the tokenizer's vocabulary: decodes to nothing.
  with_unknown.push_back(static_cast<int32_t>(t->vocab_size()));
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

// The tiny tokenizer with a Qwen3-like chat template: tools printed with tojson, enable_thinking.
std::unique_ptr<Tokenizer> TinyWithToolsTemplate() {
  nlohmann::json config = nlohmann::json::parse(MakeTinyTokenizerConfigJson());
  config["chat_template"] =
      "{%- if tools %}<tools>{% for tool in tools %}{{ '\\n' }}{{ tool | tojson }}{% endfor %}"
      "{{ '\\n' }}</tools>"
      "{% endif %}"
      "{%- for m in messages %}<{{ m.role }}>{{ m.content }}{{ eos_token }}{% endfor %}"
      "{%- if add_generation_prompt %}<assistant>{% if enable_thinking is defined and "
      "enable_thinking is false %}<think></think>{% endif %}{% endif %}";
  auto t = Tokenizer::FromJson(MakeTinyTokenizerJson(300), config.dump());
  EXPECT_TRUE(t.ok()) << t.status();
  return *std::move(t);
}

TEST(TokenizerTemplateKwargsTest, EnableThinkingAndToolsKeepTheirKeyOrder) {
  auto t = TinyWithToolsTemplate();
  const std::vector<ChatMessage> messages = {{"user", "Weather?"}};
  // Keys deliberately out of sorted order; a renderer sorting them fails here.
  const std::string kwargs =
      R"({"tools": [{"type": "function", "function": {"name": "get_weather", "description": "d",)"
      R"( "parameters": {"type": "object", "properties": {"zeta": {"type": "string"},)"
      R"( "alpha": {"type": "integer"}}, "required": ["zeta"]}}}], "enable_thinking": false})";
  absl::StatusOr<std::string> rendered =
      t->ApplyChatTemplate(messages, /*add_generation_prompt=*/true, RenderBudget(), kwargs);
  ASSERT_TRUE(rendered.ok()) << rendered.status();
  EXPECT_EQ(*rendered,
            "<tools>\n"
            R"({"type": "function", "function": {"name": "get_weather", "description": "d", )"
            R"("parameters": {"type": "object", "properties": {"zeta": {"type": "string"}, )"
            R"("alpha": {"type": "integer"}}, "required": ["zeta"]}}})"
            "\n</tools><user>Weather?</s><assistant><think></think>");
  // The JSON-messages path takes the same kwargs.
  absl::StatusOr<std::string> from_json = t->ApplyChatTemplateJson(
      nlohmann::ordered_json::parse(R"([{"role": "user", "content": "Weather?"}])"), true,
      RenderBudget(), kwargs);
  ASSERT_TRUE(from_json.ok()) << from_json.status();
  EXPECT_EQ(*from_json, *rendered);
  // Empty text: no kwargs, as the overload without them.
  EXPECT_EQ(*t->ApplyChatTemplate(messages, true, RenderBudget(), ""),
            "<user>Weather?</s><assistant>");
  EXPECT_EQ(*t->ApplyChatTemplate(messages, true), "<user>Weather?</s><assistant>");
  EXPECT_EQ(*t->ApplyChatTemplate(messages, true, RenderBudget(), R"({"enable_thinking": true})"),
            "<user>Weather?</s><assistant>");
}

TEST(TokenizerTemplateKwargsTest, ErrorsStartWithTemplateKwargs) {
  auto t = TinyWithToolsTemplate();
  auto error = [&](std::string_view kwargs) {
    absl::StatusOr<std::string> out =
        t->ApplyChatTemplate({{"user", "x"}}, true, RenderBudget(), kwargs);
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << kwargs;
    return std::string(out.status().message());
  };
  EXPECT_EQ(error(R"({"enable_thinking": False})"),
            "template_kwargs: not valid JSON: parse error at line 1, column 21: syntax error "
            "while parsing value - invalid literal");
  EXPECT_EQ(error(R"([{"enable_thinking": false}])"), "template_kwargs: must be a JSON object");
  EXPECT_EQ(error(std::string(101, '[') + std::string(101, ']')),
            "template_kwargs: nested deeper than 100 levels");
  EXPECT_EQ(error(R"({"a": )" + std::string(100, '[') + std::string(100, ']') + "}"),
            "template_kwargs: nested deeper than 100 levels");
  EXPECT_TRUE(t->ApplyChatTemplate({{"user", "x"}}, true, RenderBudget(),
                                   R"({"a": )" + std::string(99, '[') + std::string(99, ']') + "}")
                  .ok());
  EXPECT_EQ(error(R"({"messages": []})"),
            "template_kwargs.messages: is set by the request, not by template_kwargs");
  EXPECT_EQ(error(R"({"add_generation_prompt": false})"),
            "template_kwargs.add_generation_prompt: is set by the request, not by template_kwargs");
  EXPECT_EQ(error(R"({"bos_token": ""})"),
            "template_kwargs.bos_token: is set by the request, not by template_kwargs");
  EXPECT_EQ(error(R"({"eos_token": ""})"),
            "template_kwargs.eos_token: is set by the request, not by template_kwargs");
  // Errors of the template itself are unchanged.
  auto no_template = Tokenizer::FromJson(MakeTinyTokenizerJson(300), "{}");
  ASSERT_TRUE(no_template.ok()) << no_template.status();
  EXPECT_EQ((*no_template)
                ->ApplyChatTemplate({{"user", "x"}}, true, RenderBudget(), "not json")
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
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

TEST(TokenizerTest, FromDirectoryRefusesSpecialFilesAndNamesThePath) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("kvserve_tokenizer_special_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::create_symlink("/dev/zero", dir / "tokenizer.json");
  auto zero = Tokenizer::FromDirectory(dir.string());
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(zero.status().message()),
            (dir / "tokenizer.json").string() + ": not a regular file (a character device)");

  fs::remove(dir / "tokenizer.json");
  std::ofstream(dir / "tokenizer.json") << MakeTinyTokenizerJson(300);
  fs::create_directories(dir / "tokenizer_config.json");
  auto folder = Tokenizer::FromDirectory(dir.string());
  EXPECT_EQ(folder.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(folder.status().message()),
            (dir / "tokenizer_config.json").string() + ": not a regular file (a directory)");

  fs::remove_all(dir / "tokenizer_config.json");
  std::ofstream(dir / "tokenizer_config.json") << R"({"clean_up_tokenization_spaces": 1})";
  auto mistyped = Tokenizer::FromDirectory(dir.string());
  fs::remove_all(dir);
  EXPECT_EQ(mistyped.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(mistyped.status().message()),
            (dir / "tokenizer_config.json").string() +
                ": clean_up_tokenization_spaces: expected a boolean or null, got integer");
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

// FromJson must fail with InvalidArgument and exactly `message`.
void ExpectFromJsonError(const std::string& json, const std::string& config,
                         const std::string& message) {
  auto t = Tokenizer::FromJson(json, config);
  ASSERT_FALSE(t.ok()) << "accepted: " << json.substr(0, 200);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(t.status().message()), message);
}

TEST(TokenizerErrorsTest, NamesTheFileAndThePath) {
  auto expect_error = [](const std::string& json, const std::string& message) {
    ExpectFromJsonError(json, "", message);
  };
  expect_error("{not json", "tokenizer.json: not valid JSON");
  expect_error("[]", "tokenizer.json: the top level: expected an object, got array");
  expect_error("{}", "tokenizer.json: model: missing, expected an object");
  expect_error(R"({"model": {"type": "Unigram", "vocab": []}})",
               "tokenizer.json: model.type: unsupported model type 'Unigram'");
  expect_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}})",
               "tokenizer.json: model.merges[0]: merge 'a b' uses a token missing from the vocab");
  expect_error(R"({"model": {"vocab": {"a": 0}, "merges": [["a"]]}})",
               "tokenizer.json: model.merges[0]: expected a string \"left right\" or a pair of "
               "strings, got array");
  expect_error(R"({"model": {"vocab": {"a.b": -1}, "merges": []}})",
               "tokenizer.json: model.vocab[\"a.b\"]: must be in [0, 4194303] (got -1)");
  expect_error(R"({"model": {"vocab": {"a": 0}, "merges": [], "unk_token": "<unk>"}})",
               "tokenizer.json: model.unk_token: '<unk>' is not in the vocab");
  expect_error(R"({"model": {"vocab": {"a": 0}, "merges": [], "byte_fallback": 1}})",
               "tokenizer.json: model.byte_fallback: expected a boolean, got integer");
  expect_error(R"({"model": {"vocab": {"a": 0}, "merges": [], "dropout": 0.1}})",
               "tokenizer.json: model.dropout: unsupported BPE option (got 0.1; only 0 or null "
               "is supported)");
  expect_error(R"({"model": {"vocab": {"a": 0}, "merges": []}, "added_tokens": {}})",
               "tokenizer.json: added_tokens: expected an array or null, got object");
  expect_error(
      R"({"model": {"vocab": {"a": 0}, "merges": []}, "added_tokens": [{"content": "x"}]})",
      "tokenizer.json: added_tokens[0].id: missing, expected an integer");
  nlohmann::json tiny = nlohmann::json::parse(MakeTinyTokenizerJson(300));
  tiny["normalizer"] = {{"type", "BertNormalizer"}};
  expect_error(tiny.dump(),
               "tokenizer.json: normalizer.type: unsupported normalizer type 'BertNormalizer'");
  tiny["normalizer"] = nullptr;
  tiny["pre_tokenizer"] = {{"type", "Punctuation"}};
  expect_error(tiny.dump(),
               "tokenizer.json: pre_tokenizer.type: unsupported pre_tokenizer type 'Punctuation'");
  tiny["pre_tokenizer"] = nullptr;
  tiny["decoder"] = {{"type", "CTC"}};
  expect_error(tiny.dump(), "tokenizer.json: decoder.type: unsupported decoder type 'CTC'");
  tiny["decoder"] = nullptr;
  tiny["post_processor"] = {{"type", "Fancy"}};
  expect_error(tiny.dump(),
               "tokenizer.json: post_processor.type: unsupported post_processor type 'Fancy'");
  tiny["post_processor"] = {{"type", "BertProcessing"}, {"cls", {"[CLS]", 1}}, {"sep", {"[SEP]"}}};
  expect_error(tiny.dump(),
               "tokenizer.json: post_processor.sep: expected a [\"<token>\", <id>] pair");
  tiny["post_processor"] = {
      {"type", "Sequence"},
      {"processors",
       {{{"type", "ByteLevel"}},
        {{"type", "RobertaProcessing"}, {"cls", {"<s>", 0}}, {"sep", {"</s>", "2"}}}}}};
  expect_error(tiny.dump(),
               "tokenizer.json: post_processor.processors[1].sep[1]: expected an integer, got "
               "string");
  tiny["post_processor"] = nlohmann::json::parse(R"({"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A"}}],
      "special_tokens": {"<s>": {"id": "<s>", "ids": [1, -2]}}})");
  expect_error(tiny.dump(),
               "tokenizer.json: post_processor.special_tokens[\"<s>\"].ids[1]: must be in [0, "
               "2147483647] (got -2)");
  tiny["post_processor"]["special_tokens"] = nlohmann::json::object();
  expect_error(tiny.dump(),
               "tokenizer.json: post_processor.special_tokens[\"<s>\"]: missing, but "
               "post_processor.single[0].SpecialToken.id names it");
}

TEST(TokenizerErrorsTest, DeeplyNestedJsonIsRefusedBeforeParsing) {
  // The component parsers recurse once per level: 100,000 levels would exhaust the stack.
  std::string deep = R"({"model": {"vocab": {"a": 0}, "merges": []}, "normalizer": )";
  for (int i = 0; i < 100000; ++i) deep += R"({"type": "Sequence", "normalizers": [)";
  ExpectFromJsonError(deep, "", "tokenizer.json: nested deeper than 64 levels");
}

TEST(TokenizerErrorsTest, ConfigErrorsNameTokenizerConfigJson) {
  const std::string json = MakeTinyTokenizerJson(300);
  ExpectFromJsonError(json, "{", "tokenizer_config.json: not valid JSON");
  ExpectFromJsonError(json, R"({"eos_token": {"content": 5}})",
                      "tokenizer_config.json: eos_token.content: expected a string, got integer");
  ExpectFromJsonError(json, R"({"chat_template": 5})",
                      "tokenizer_config.json: chat_template: expected a string, an array of "
                      "{\"name\", \"template\"} objects, or null, got integer");
  ExpectFromJsonError(json, R"({"chat_template": [{"template": "x"}]})",
                      "tokenizer_config.json: chat_template[0].name: missing, expected a string");
  // Nulls are what Transformers writes for absent values.
  auto t = Tokenizer::FromJson(
      json, R"({"bos_token": null, "eos_token": "</s>", "clean_up_tokenization_spaces": null,
                "chat_template": null})");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE((*t)->clean_up_tokenization_spaces());
  EXPECT_THAT((*t)->eos_token_ids(), ElementsAre(kTinyEosId));
}

TEST(TokenizerErrorsTest, NamedChatTemplatesUseDefault) {
  auto t = Tokenizer::FromJson(MakeTinyTokenizerJson(300), R"({"chat_template": [
      {"name": "tool_use", "template": "tools"}, {"name": "default", "template": "plain"}]})");
  ASSERT_TRUE(t.ok()) << t.status();
  absl::StatusOr<std::string> rendered = (*t)->ApplyChatTemplate({{"user", "x"}}, false);
  ASSERT_TRUE(rendered.ok()) << rendered.status();
  EXPECT_EQ(*rendered, "plain");
}

// The reproducers of tests/data/hostile/tokenizer: each used to end the process or be
// misreported.
class HostileTokenizerTest : public ::testing::Test {
 protected:
  static std::string Read(const std::string& name) {
    std::ifstream in(std::string(KVSERVE_SOURCE_DIR) + "/tests/data/hostile/tokenizer/" + name,
                     std::ios::binary);
    EXPECT_TRUE(in.good()) << name;
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  }
  static void ExpectError(const std::string& json_file, const std::string& config_file,
                          const std::string& message) {
    ExpectFromJsonError(Read(json_file), config_file.empty() ? "" : Read(config_file), message);
  }
};

TEST_F(HostileTokenizerTest, TypeErrorsNameTheJsonPath) {
  ExpectError("model_type_integer.json", "",
              "tokenizer.json: model.type: expected a string or null, got integer");
  ExpectError("model_dropout_string.json", "",
              "tokenizer.json: model.dropout: expected a number or null, got string");
  ExpectError("added_token_special_yes.json", "",
              "tokenizer.json: added_tokens[0].special: expected a boolean, got string");
  ExpectError("template_special_token_id_integer.json", "",
              "tokenizer.json: post_processor.single[0].SpecialToken.id: expected a string, got "
              "integer");
  ExpectError("normalizer_strip_left_integer.json", "",
              "tokenizer.json: normalizer.normalizers[1].strip_left: expected a boolean, got "
              "integer");
  ExpectError("byte_level_add_prefix_space_string.json", "",
              "tokenizer.json: pre_tokenizer.add_prefix_space: expected a boolean, got string");
  ExpectError("strip_decoder_stop_string.json", "",
              "tokenizer.json: decoder.stop: expected an integer, got string");
  ExpectError("metaspace_decoder_empty_replacement.json", "",
              "tokenizer.json: decoder.replacement: must not be empty");
  ExpectError("valid_minimal.json", "tokenizer_config_clean_up_yes.json",
              "tokenizer_config.json: clean_up_tokenization_spaces: expected a boolean or null, "
              "got string");
  ExpectError("valid_minimal.json", "tokenizer_config_chat_template_integer.json",
              "tokenizer_config.json: chat_template[0].template: expected a string, got integer");
  ExpectError("valid_minimal.json", "tokenizer_config_bos_token_integer.json",
              "tokenizer_config.json: bos_token: expected a string, an object with a string "
              "'content', or null, got integer");
}

TEST_F(HostileTokenizerTest, IdsOutOfRangeAreRefused) {
  ExpectError("added_token_id_4e9.json", "",
              "tokenizer.json: added_tokens[3].id: must be in [0, 2147483647] (got 4000000000)");
  // The id -> token table is dense, so a vocab id sizes an allocation.
  ExpectError("vocab_id_2e9.json", "",
              "tokenizer.json: model.vocab[\"b\"]: must be in [0, 4194303] (got 2000000000)");
}

TEST_F(HostileTokenizerTest, IdsBeyondTheModelVocabDoNotFit) {
  auto t = Tokenizer::FromJson(Read("added_token_id_300.json"), "");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->vocab_size(), 301);
  EXPECT_TRUE((*t)->CheckFitsModel(301).ok());
  EXPECT_TRUE((*t)->CheckFitsModel(512).ok());  // a padded model vocab is fine
  absl::Status status = (*t)->CheckFitsModel(300);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(status.message()),
            "tokenizer.json: token ids go up to 300 (vocab size 301), beyond config.json's "
            "vocab_size 300");
}

TEST(TokenizerTest, PostProcessorIdsCountTowardsTheVocabSize) {
  nlohmann::json tiny = nlohmann::json::parse(MakeTinyTokenizerJson(300));
  tiny["post_processor"] = nlohmann::json::parse(R"({"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<x>", "type_id": 0}}, {"Sequence": {"id": "A"}}],
      "special_tokens": {"<x>": {"id": "<x>", "ids": [700]}}})");
  auto t = Tokenizer::FromJson(tiny.dump(), "");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->vocab_size(), 701);
  EXPECT_THAT(*(*t)->Encode("a", true), ElementsAre(700, 'a'));
  EXPECT_EQ(std::string((*t)->CheckFitsModel(700).message()),
            "tokenizer.json: token ids go up to 700 (vocab size 701), beyond config.json's "
            "vocab_size 700");
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
}  // namespace kvserve::tokenizer
