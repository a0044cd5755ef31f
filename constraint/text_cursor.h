// TextCursor: the reading position shared by the GBNF and regex parsers: code points of UTF-8
// text, line and column for errors, and the escapes both syntaxes share.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"

namespace kvserve::constraint {

class TextCursor {
 public:
  explicit TextCursor(std::string_view text) : text_(text) {}

  bool done() const { return pos_ >= text_.size(); }
  // The next byte, or '\0' at the end.
  char peek(size_t ahead = 0) const {
    return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0';
  }
  bool Consume(char c) {
    if (peek() != c || done()) return false;
    Advance();
    return true;
  }
  bool ConsumeText(std::string_view s) {
    if (text_.substr(pos_, s.size()) != s) return false;
    for (size_t i = 0; i < s.size(); ++i) Advance();
    return true;
  }
  // Reads one code point (a malformed UTF-8 byte reads as itself and fails `*ok`).
  uint32_t NextCodePoint(bool* ok);
  // After a backslash: reads \xHH, \uHHHH, \u{H...}, \UHHHHHHHH, or a one-letter control escape
  // (n r t f v 0), into `*cp`; nullopt when the next character is none of those (the caller
  // decides what else it means), an error for a malformed hex escape.
  absl::StatusOr<std::optional<uint32_t>> ReadCommonEscape();

  // A quantifier here (* + ? {m} {m,} {m,n}; a '{' counts only when a digit follows it):
  // consumes it and returns (min, max), max -1 for no bound; nullopt, consuming nothing, when
  // none starts here. Errors name a bound above `max_repeat`, n < m and a missing '}'.
  absl::StatusOr<std::optional<std::pair<int64_t, int64_t>>> ReadQuantifier(int64_t max_repeat);

  // InvalidArgument "line L, column C: message" at the current position.
  absl::Status Error(std::string_view message) const;
  size_t pos() const { return pos_; }

 private:
  void Advance() {
    if (text_[pos_] == '\n') {
      ++line_;
      column_ = 1;
    } else if ((static_cast<uint8_t>(text_[pos_]) & 0xC0) != 0x80) {
      ++column_;
    }
    ++pos_;
  }
  std::string_view text_;
  size_t pos_ = 0;
  int line_ = 1;
  int column_ = 1;
};

}  // namespace kvserve::constraint
