// Fuzzes tokenizer.json loading, Encode, Decode and the incremental detokenizer.
//
// Input: "<tokenizer.json>\0<text>[\0<tokenizer_config.json>]" loads that tokenizer and runs
// the text through it; an input without a NUL byte is text for three built-in tokenizers (the
// tiny byte-level BPE, a SentencePiece-style BPE with byte fallback, and a byte-level BPE
// behind normalizers and regex splits). Checked for every tokenizer and text:
//  - Encode fails only for text that is not valid UTF-8, and its ids are inside vocab_size();
//  - Decode gives valid UTF-8 (it ends up in proto string fields), for the encoded ids and
//    for arbitrary ids made from the text's bytes;
//  - the incremental detokenizer's deltas are valid UTF-8 and add up to Decode (the first 256
//    ids of the text, and arbitrary ids);
//  - the tiny byte-level tokenizer decodes what it encoded back to the text.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "base/check.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tiny_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace {

using kvserve::tokenizer::IncrementalDetokenizer;
using kvserve::tokenizer::Tokenizer;
using Json = nlohmann::ordered_json;

// Well-formed UTF-8 (no surrogates, no overlongs, at most U+10FFFF), written here rather than
// taken from the code under test.
bool IsUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    int n = 0;
    uint32_t cp = 0, min = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 1, cp = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2, cp = c & 0x0F, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3, cp = c & 0x07, min = 0x10000;
    } else {
      return false;
    }
    if (s.size() - i <= static_cast<size_t>(n)) return false;
    for (int k = 1; k <= n; ++k) {
      const unsigned char d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n + 1;
  }
  return true;
}

// A SentencePiece-style tokenizer: "▁" prepended and for spaces, BPE with byte fallback, a
// decoder undoing both.
std::string SentencePieceJson() {
  static constexpr char kHex[] = "0123456789ABCDEF";
  const std::string kSpace = "\xE2\x96\x81";
  Json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b)
    vocab[std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">"] = 3 + b;
  int next = 259;
  for (std::string piece :
       {kSpace, std::string("t"), std::string("h"), std::string("e"), std::string("a"),
        std::string("n"), std::string("th"), std::string("he"), kSpace + "t", kSpace + "th",
        kSpace + "the", std::string("an"), kSpace + "a", kSpace + "an"}) {
    vocab[piece] = next++;
  }
  const Json added = Json::array({
      {{"id", 0}, {"content", "<unk>"}, {"special", true}, {"normalized", false}},
      {{"id", 1}, {"content", "<s>"}, {"special", true}, {"normalized", false}},
      {{"id", 2}, {"content", "</s>"}, {"special", true}, {"normalized", false}},
      {{"id", next},
       {"content", "[INST]"},
       {"special", false},
       {"normalized", true},
       {"lstrip", true},
       {"rstrip", true}},
  });
  Json tokenizer = {
      {"added_tokens", added},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         Json::array(
             {{{"type", "Prepend"}, {"prepend", kSpace}},
              {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSpace}}})}}},
      {"pre_tokenizer", nullptr},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", Json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"special_tokens",
         {{"<s>", {{"id", "<s>"}, {"ids", Json::array({1})}, {"tokens", {"<s>"}}}}}}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         Json::array({{{"type", "Replace"}, {"pattern", {{"String", kSpace}}}, {"content", " "}},
                      {{"type", "ByteFallback"}},
                      {{"type", "Fuse"}},
                      {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}}},
      {"model",
       {{"type", "BPE"},
        {"unk_token", "<unk>"},
        {"fuse_unk", true},
        {"byte_fallback", true},
        {"vocab", vocab},
        {"merges", Json::array({"t h", "h e", kSpace + " t", kSpace + "t h", kSpace + "th e", "a n",
                                kSpace + " a", kSpace + "a n"})}}}};
  return tokenizer.dump();
}

// The tiny byte-level tokenizer behind NFKC, lowercase and strip normalizers and a digits and
// a GPT-4-style regex split, with an lstrip/rstrip single-word added token.
std::string NormalizedByteLevelJson() {
  Json tokenizer = Json::parse(kvserve::tokenizer::MakeTinyTokenizerJson(400));
  tokenizer["normalizer"] = {
      {"type", "Sequence"},
      {"normalizers",
       Json::array({{{"type", "NFKC"}},
                    {{"type", "Lowercase"}},
                    {{"type", "Strip"}, {"strip_left", true}, {"strip_right", false}}})}};
  const std::string gpt4 =
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
      "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  tokenizer["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       Json::array({{{"type", "Digits"}, {"individual_digits", false}},
                    {{"type", "Split"},
                     {"pattern", {{"Regex", gpt4}}},
                     {"behavior", "Isolated"},
                     {"invert", false}},
                    {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}};
  tokenizer["added_tokens"].push_back({{"id", 399},
                                       {"content", "<tool>"},
                                       {"single_word", true},
                                       {"lstrip", true},
                                       {"rstrip", true},
                                       {"normalized", true},
                                       {"special", false}});
  return tokenizer.dump();
}

struct BuiltIn {
  std::unique_ptr<Tokenizer> tokenizer;
  bool round_trips;  // Decode(Encode(text)) == text for valid UTF-8 text
};

std::vector<BuiltIn>* built_ins = nullptr;

std::unique_ptr<Tokenizer> MustLoad(const std::string& json, const std::string& config) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::FromJson(json, config);
  KVSERVE_CHECK(t.ok()) << t.status();
  return *std::move(t);
}

// Arbitrary ids from the text's bytes, many of them outside the vocabulary (and negative).
std::vector<int32_t> IdsFromBytes(std::string_view text, int64_t vocab_size) {
  std::vector<int32_t> ids;
  const int64_t range = vocab_size + 16;
  for (size_t i = 0; i + 1 < text.size() && ids.size() < 64; i += 2) {
    const int16_t raw = static_cast<int16_t>(static_cast<uint8_t>(text[i]) |
                                             (static_cast<uint8_t>(text[i + 1]) << 8));
    ids.push_back(static_cast<int32_t>(raw % range));
  }
  return ids;
}

void CheckDecode(const Tokenizer& t, const std::vector<int32_t>& ids) {
  for (bool skip : {false, true}) {
    const std::string text = t.Decode(ids, skip);
    KVSERVE_CHECK(IsUtf8(text)) << "Decode gave invalid UTF-8 (skip " << skip << ")";
    IncrementalDetokenizer stream(&t, skip);
    std::string streamed;
    for (int32_t id : ids) {
      const std::string delta = stream.Add(id);
      KVSERVE_CHECK(IsUtf8(delta)) << "incremental delta is not valid UTF-8";
      streamed += delta;
    }
    const std::string rest = stream.Finish();
    KVSERVE_CHECK(IsUtf8(rest));
    streamed += rest;
    KVSERVE_CHECK(streamed == text)
        << "incremental '" << streamed << "' != Decode '" << text << "' (skip " << skip << ")";
  }
}

void Exercise(const Tokenizer& t, std::string_view text, bool round_trips) {
  const bool valid = IsUtf8(text);
  for (bool special : {false, true}) {
    absl::StatusOr<std::vector<int32_t>> ids = t.Encode(text, special);
    KVSERVE_CHECK(ids.ok() == valid)
        << "Encode of " << (valid ? "valid" : "invalid") << " UTF-8: " << ids.status();
    if (!ids.ok()) continue;
    for (int32_t id : *ids) KVSERVE_CHECK(id >= 0 && id < t.vocab_size()) << id;
    if (round_trips && !special) {
      KVSERVE_CHECK(t.Decode(*ids, false) == text) << "no round trip";
    }
    if (special) {
      // The incremental detokenizer decodes once per id: its first 256 keep a run fast.
      ids->resize(std::min<size_t>(ids->size(), 256));
      CheckDecode(t, *ids);
    } else {
      KVSERVE_CHECK(IsUtf8(t.Decode(*ids, true)) && IsUtf8(t.Decode(*ids, false)));
    }
  }
  CheckDecode(t, IdsFromBytes(text, t.vocab_size()));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  built_ins = new std::vector<BuiltIn>();
  built_ins->push_back({MustLoad(kvserve::tokenizer::MakeTinyTokenizerJson(400),
                                 kvserve::tokenizer::MakeTinyTokenizerConfigJson()),
                        true});
  built_ins->push_back({MustLoad(SentencePieceJson(), ""), false});
  built_ins->push_back({MustLoad(NormalizedByteLevelJson(), ""), false});
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  if (nul == std::string_view::npos) {
    for (const BuiltIn& b : *built_ins) Exercise(*b.tokenizer, input, b.round_trips);
    return 0;
  }
  const std::string_view json = input.substr(0, nul);
  std::string_view text = input.substr(nul + 1), config;
  if (const size_t second = text.find('\0'); second != std::string_view::npos) {
    config = text.substr(second + 1);
    text = text.substr(0, second);
  }
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::FromJson(json, config);
  if (!t.ok()) return 0;
  KVSERVE_CHECK((*t)->vocab_size() >= 0 && (*t)->vocab_size() <= (int64_t{1} << 31));
  KVSERVE_CHECK((*t)->CheckFitsModel((*t)->vocab_size()).ok());
  if (std::optional<int32_t> bos = (*t)->bos_token_id()) {
    KVSERVE_CHECK(*bos >= 0 && *bos < (*t)->vocab_size()) << *bos;
  }
  for (int32_t eos : (*t)->eos_token_ids()) {
    KVSERVE_CHECK(eos >= 0 && eos < (*t)->vocab_size()) << eos;
  }
  Exercise(**t, text, false);
  if (!config.empty() && (*t)->CheckChatTemplate().ok()) {
    kvserve::tokenizer::RenderBudget budget;
    budget.max_steps = 100'000;
    budget.max_output_bytes = 1 << 20;
    (void)(*t)->ApplyChatTemplate({{"user", std::string(text)}}, true, budget);
  }
  return 0;
}
