// A compiled Oniguruma regular expression over UTF-8 text (the engine Hugging Face tokenizers use).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace kvserve::tokenizer {

class UnicodeRegex {
 public:
  // Compiles `pattern` (Ruby syntax, UTF-8). InvalidArgument with Oniguruma's message when the
  // pattern does not compile.
  static absl::StatusOr<std::unique_ptr<UnicodeRegex>> Create(std::string_view pattern);
  ~UnicodeRegex();
  UnicodeRegex(const UnicodeRegex&) = delete;
  UnicodeRegex& operator=(const UnicodeRegex&) = delete;

  // Appends the [begin, end) byte ranges of all non-overlapping matches, leftmost first. An
  // empty match advances by one character. Safe to call from several threads at once.
  void FindAll(std::string_view text, std::vector<std::pair<size_t, size_t>>* matches) const;

 private:
  explicit UnicodeRegex(void* regex) : regex_(regex) {}
  void* regex_;  // regex_t*, owned
};

}  // namespace kvserve::tokenizer
