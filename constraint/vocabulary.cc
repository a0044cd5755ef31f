// TokenBytesOf: decodings after an anchor token.
#include "constraint/vocabulary.h"

#include <cctype>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode_utils.h"

namespace kvserve::constraint {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

// The raw bytes of a token whose decoding is not valid UTF-8 on its own (part of a character):
// a byte-level BPE token's characters through GPT-2's byte map, or a byte-fallback <0xNN>;
// nullopt when the token is neither.
std::optional<std::string> RawBytes(const std::string& token) {
  if (token.size() == 6 && token.starts_with("<0x") && token.back() == '>') {
    const int hi = std::isxdigit(static_cast<unsigned char>(token[3]));
    const int lo = std::isxdigit(static_cast<unsigned char>(token[4]));
    if (hi && lo) {
      return std::string(1, static_cast<char>(std::stoi(token.substr(3, 2), nullptr, 16)));
    }
  }
  const auto& table = tokenizer::GetByteLevelTables().char_to_byte;
  std::string bytes;
  size_t pos = 0;
  while (pos < token.size()) {
    const char32_t cp = tokenizer::DecodeUtf8(token, &pos);
    if (cp >= table.size() || table[cp] < 0) return std::nullopt;
    bytes.push_back(static_cast<char>(table[cp]));
  }
  return bytes;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> TokenBytesOf(const tokenizer::Tokenizer& tokenizer) {
  const int32_t vocab = static_cast<int32_t>(tokenizer.vocab_size());
  // The anchor: a token decoding to one ASCII letter on its own and after itself.
  std::optional<int32_t> anchor;
  std::string anchor_text;
  for (const char* candidate : {"a",
                                "\xE2\x96\x81"
                                "a",
                                "x",
                                "\xC4\xA0"
                                "a"}) {
    std::optional<int32_t> id = tokenizer.TokenToId(candidate);
    if (!id || tokenizer.IsSpecialToken(*id)) continue;
    const std::string text = tokenizer.DecodeWithoutCleanup({*id}, false);
    if (text.size() == 1 || (text.size() == 2 && text[0] == ' ')) {
      anchor = id;
      anchor_text = text;
      break;
    }
  }
  if (!anchor) {
    return absl::FailedPreconditionError("the vocabulary has no plain one-letter token");
  }
  std::vector<std::string> out(vocab);
  for (int32_t id = 0; id < vocab; ++id) {
    if (tokenizer.IsSpecialToken(id)) continue;
    const int32_t pair[] = {*anchor, id};
    const std::string text = tokenizer.DecodeWithoutCleanup(pair, false);
    if (text.compare(0, anchor_text.size(), anchor_text) != 0) continue;
    out[id] = text.substr(anchor_text.size());
    // A piece of a character decodes to U+FFFD alone; the mask must see the bytes it adds.
    if (out[id].find(kReplacement) != std::string::npos) {
      const std::optional<std::string> token = tokenizer.IdToToken(id);
      if (token && token->find(kReplacement) == std::string::npos) {
        if (std::optional<std::string> raw = RawBytes(*token)) out[id] = *std::move(raw);
      }
    }
  }
  return out;
}

}  // namespace kvserve::constraint
