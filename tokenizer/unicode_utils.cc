// UTF-8 helpers, the GPT-2 byte-to-character table and Unicode normalization (utf8proc).
#include "tokenizer/unicode_utils.h"

#include <utf8proc.h>

#include <cstdlib>

namespace kvserve::tokenizer {

int Utf8SequenceLength(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

namespace {

// Length of the valid sequence at text[pos], or 0 when it is invalid or truncated.
size_t ValidSequenceLength(std::string_view text, size_t pos) {
  const auto b0 = static_cast<unsigned char>(text[pos]);
  if (b0 < 0x80) return 1;
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (pos + n > text.size()) return 0;
  const auto b1 = static_cast<unsigned char>(text[pos + 1]);
  if (b1 < lo || b1 > hi) return 0;
  for (size_t i = 2; i < n; ++i) {
    const auto b = static_cast<unsigned char>(text[pos + i]);
    if ((b & 0xC0) != 0x80) return 0;
  }
  return n;
}

// Length of the maximal prefix of an invalid sequence at pos that could start a valid one.
size_t InvalidSubpartLength(std::string_view text, size_t pos) {
  const auto b0 = static_cast<unsigned char>(text[pos]);
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 1;
  }
  size_t i = 1;
  for (; i < n && pos + i < text.size(); ++i) {
    const auto b = static_cast<unsigned char>(text[pos + i]);
    if (i == 1 ? (b < lo || b > hi) : ((b & 0xC0) != 0x80)) break;
  }
  return i;
}

}  // namespace

char32_t DecodeUtf8(std::string_view text, size_t* pos) {
  const size_t n = ValidSequenceLength(text, *pos);
  if (n == 0) {
    *pos += 1;
    return 0xFFFD;
  }
  const auto* p = reinterpret_cast<const unsigned char*>(text.data() + *pos);
  char32_t cp;
  switch (n) {
    case 1:
      cp = p[0];
      break;
    case 2:
      cp = ((p[0] & 0x1F) << 6) | (p[1] & 0x3F);
      break;
    case 3:
      cp = ((p[0] & 0x0F) << 12) | ((p[1] & 0x3F) << 6) | (p[2] & 0x3F);
      break;
    default:
      cp = ((p[0] & 0x07) << 18) | ((p[1] & 0x3F) << 12) | ((p[2] & 0x3F) << 6) | (p[3] & 0x3F);
  }
  *pos += n;
  return cp;
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string Utf8Lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    const size_t n = ValidSequenceLength(bytes, pos);
    if (n > 0) {
      out.append(bytes.substr(pos, n));
      pos += n;
    } else {
      out.append("\xEF\xBF\xBD");
      pos += InvalidSubpartLength(bytes, pos);
    }
  }
  return out;
}

bool IsValidUtf8(std::string_view bytes) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    if (static_cast<unsigned char>(bytes[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const size_t n = ValidSequenceLength(bytes, pos);
    if (n == 0) return false;
    pos += n;
  }
  return true;
}

bool IsUnicodeWhitespace(char32_t cp) {
  switch (cp) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

const ByteLevelTables& GetByteLevelTables() {
  static const ByteLevelTables* const tables = [] {
    auto* t = new ByteLevelTables();
    t->char_to_byte.fill(-1);
    int next_unprintable = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      const int cp = printable ? b : next_unprintable++;
      AppendUtf8(static_cast<char32_t>(cp), &t->byte_to_utf8[b]);
      t->char_to_byte[cp] = static_cast<int16_t>(b);
    }
    return t;
  }();
  return *tables;
}

std::string NormalizeUnicode(std::string_view text, NormalizationForm form) {
  bool ascii = true;
  for (char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) {
      ascii = false;
      break;
    }
  }
  if (ascii) return std::string(text);
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalizationForm::kNfc:
      options |= UTF8PROC_COMPOSE;
      break;
    case NormalizationForm::kNfd:
      options |= UTF8PROC_DECOMPOSE;
      break;
    case NormalizationForm::kNfkc:
      options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
      break;
    case NormalizationForm::kNfkd:
      options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
      break;
  }
  utf8proc_uint8_t* result = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                          static_cast<utf8proc_ssize_t>(text.size()), &result,
                                          static_cast<utf8proc_option_t>(options));
  if (n < 0) return std::string(text);
  std::string out(reinterpret_cast<char*>(result), static_cast<size_t>(n));
  std::free(result);
  return out;
}

std::string LowercaseUnicode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const auto b = static_cast<unsigned char>(text[pos]);
    if (b < 0x80) {
      out.push_back(static_cast<char>(b >= 'A' && b <= 'Z' ? b + 32 : b));
      ++pos;
      continue;
    }
    const char32_t cp = DecodeUtf8(text, &pos);
    if (cp == 0x130) {  // 'İ' lowercases to "i̇" under the full (non-Turkic) mapping.
      out.append("i\xCC\x87");
      continue;
    }
    AppendUtf8(static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))), &out);
  }
  return out;
}

}  // namespace kvserve::tokenizer
