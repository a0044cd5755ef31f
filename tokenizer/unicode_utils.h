// UTF-8 helpers, the GPT-2 byte-to-character table and Unicode normalization (utf8proc).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/strings/string_view.h"

namespace kvserve::tokenizer {

// This abseil build has its own string_view type; adapts std::string_view to it.
inline absl::string_view AsAbsl(std::string_view s) {
  return absl::string_view(s.data(), s.size());
}

// Decodes the code point starting at text[*pos] and advances *pos past it. Invalid or
// truncated sequences decode as one byte each, returning 0xFFFD.
char32_t DecodeUtf8(std::string_view text, size_t* pos);

// Appends the UTF-8 encoding of `cp` to `out`.
void AppendUtf8(char32_t cp, std::string* out);

// Length in bytes of the UTF-8 sequence led by `lead` (1 for invalid lead bytes).
int Utf8SequenceLength(unsigned char lead);

// Replaces every invalid or truncated UTF-8 sequence by U+FFFD (the lossy conversion Rust's
// String::from_utf8_lossy performs: one U+FFFD per maximal invalid subpart).
std::string Utf8Lossy(std::string_view bytes);

// True when `bytes` is well-formed UTF-8.
bool IsValidUtf8(std::string_view bytes);

// True for code points with the Unicode White_Space property.
bool IsUnicodeWhitespace(char32_t cp);

// GPT-2's reversible map from bytes to printable characters (ByteLevel pre-tokenizer).
struct ByteLevelTables {
  std::array<std::string, 256> byte_to_utf8;  // byte -> UTF-8 of its printable character
  std::array<int16_t, 512> char_to_byte;      // code point (< 512) -> byte, -1 when unmapped
};
const ByteLevelTables& GetByteLevelTables();

enum class NormalizationForm { kNfc, kNfd, kNfkc, kNfkd };
// Normalizes valid UTF-8 text; invalid input is returned unchanged.
std::string NormalizeUnicode(std::string_view text, NormalizationForm form);

// Full Unicode lowercase mapping of every code point.
std::string LowercaseUnicode(std::string_view text);

}  // namespace kvserve::tokenizer
