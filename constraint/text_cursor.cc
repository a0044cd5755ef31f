// TextCursor's UTF-8 decoding, shared escapes and positioned errors.
#include "constraint/text_cursor.h"

#include "absl/strings/str_cat.h"

namespace kvserve::constraint {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

uint32_t TextCursor::NextCodePoint(bool* ok) {
  *ok = true;
  const uint8_t b0 = static_cast<uint8_t>(peek());
  int extra = 0;
  uint32_t cp = b0;
  if (b0 >= 0xF0 && b0 < 0xF8) {
    extra = 3;
    cp = b0 & 0x07;
  } else if (b0 >= 0xE0) {
    extra = b0 < 0xF0 ? 2 : -1;
    cp = b0 & 0x0F;
  } else if (b0 >= 0xC2) {
    extra = 1;
    cp = b0 & 0x1F;
  } else if (b0 >= 0x80) {
    extra = -1;
  }
  if (extra < 0) {
    *ok = false;
    Advance();
    return b0;
  }
  Advance();
  for (int i = 0; i < extra; ++i) {
    const uint8_t b = static_cast<uint8_t>(peek());
    if (done() || (b & 0xC0) != 0x80) {
      *ok = false;
      return b0;
    }
    cp = (cp << 6) | (b & 0x3F);
    Advance();
  }
  return cp;
}

absl::StatusOr<std::optional<uint32_t>> TextCursor::ReadCommonEscape() {
  const char c = peek();
  auto hex = [&](int digits) -> absl::StatusOr<uint32_t> {
    uint32_t value = 0;
    for (int i = 0; i < digits; ++i) {
      const int v = HexValue(peek());
      if (v < 0) return Error(absl::StrCat("expected ", digits, " hexadecimal digits"));
      value = value * 16 + static_cast<uint32_t>(v);
      Advance();
    }
    return value;
  };
  std::optional<uint32_t> out;
  switch (c) {
    case 'n':
      out = '\n';
      break;
    case 'r':
      out = '\r';
      break;
    case 't':
      out = '\t';
      break;
    case 'f':
      out = '\f';
      break;
    case 'v':
      out = '\v';
      break;
    case '0':
      if (peek(1) >= '0' && peek(1) <= '9') return std::optional<uint32_t>();
      out = 0;
      break;
    case 'x': {
      Advance();
      absl::StatusOr<uint32_t> v = hex(2);
      if (!v.ok()) return v.status();
      return std::optional<uint32_t>(*v);
    }
    case 'u': {
      Advance();
      if (Consume('{')) {
        uint32_t value = 0;
        int digits = 0;
        while (HexValue(peek()) >= 0 && digits < 7) {
          value = value * 16 + static_cast<uint32_t>(HexValue(peek()));
          Advance();
          ++digits;
        }
        if (digits == 0 || !Consume('}') || value > 0x10FFFF) {
          return Error("malformed \\u{...} escape");
        }
        return std::optional<uint32_t>(value);
      }
      absl::StatusOr<uint32_t> v = hex(4);
      if (!v.ok()) return v.status();
      return std::optional<uint32_t>(*v);
    }
    case 'U': {
      Advance();
      absl::StatusOr<uint32_t> v = hex(8);
      if (!v.ok()) return v.status();
      if (*v > 0x10FFFF) return Error("code point above U+10FFFF");
      return std::optional<uint32_t>(*v);
    }
    default:
      return std::optional<uint32_t>();
  }
  Advance();
  return out;
}

absl::StatusOr<std::optional<std::pair<int64_t, int64_t>>> TextCursor::ReadQuantifier(
    int64_t max_repeat) {
  using Bounds = std::optional<std::pair<int64_t, int64_t>>;
  const auto digit = [](char c) { return c >= '0' && c <= '9'; };
  const char c = peek();
  if (c == '*' || c == '+' || c == '?') {
    Advance();
    return Bounds({c == '+' ? 1 : 0, c == '?' ? 1 : -1});
  }
  if (c != '{' || !digit(peek(1))) return Bounds();
  Advance();
  const auto count = [&]() -> absl::StatusOr<int64_t> {
    if (!digit(peek())) return Error("expected a number");
    int64_t value = 0;
    while (digit(peek())) {
      value = value * 10 + (peek() - '0');
      Advance();
      if (value > max_repeat) {
        return Error(absl::StrCat("repetition bound above the limit of ", max_repeat));
      }
    }
    return value;
  };
  absl::StatusOr<int64_t> min = count();
  if (!min.ok()) return min.status();
  int64_t max = *min;
  if (Consume(',')) {
    if (peek() == '}') {
      max = -1;
    } else {
      absl::StatusOr<int64_t> n = count();
      if (!n.ok()) return n.status();
      if (*n < *min) return Error("repetition {m,n} with n < m (numbers out of order)");
      max = *n;
    }
  }
  if (!Consume('}')) return Error("expected '}'");
  return Bounds({*min, max});
}

absl::Status TextCursor::Error(std::string_view message) const {
  return absl::InvalidArgumentError(
      absl::StrCat("line ", line_, ", column ", column_, ": ", std::string(message)));
}

}  // namespace kvserve::constraint
