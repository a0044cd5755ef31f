// ParseRegex: a regular expression (an ECMAScript subset, as JSON Schema's `pattern` and
// OpenAI/vLLM `regex` constraints use) to a Grammar matching it whole.
//
// Accepted: literal characters (code points); `.` (any code point but \n \r U+2028 U+2029);
// classes [...] and [^...] with ranges and the escapes below; \d \D \w \W \s \S; \n \r \t \f \v
// \0 \xHH \uHHHH \u{H...}; an escaped syntax character (\. \* \\ \/ ...); groups ( ), (?: ) and
// (?<name> ); alternation |; quantifiers ? * + {m} {m,} {m,n}, each optionally lazy (a trailing
// ?, the same language); ^ at the very start and $ at the very end (the match is whole anyway).
// Refused, naming the column: backreferences, lookaround, \b \B, ^ or $ elsewhere, a bound
// above RegexLimits::max_repeat, and syntax errors.
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"
#include "constraint/grammar.h"

namespace kvserve::constraint {

struct RegexLimits {
  int64_t max_repeat = 1000;
  int64_t max_pattern_bytes = 64 << 10;
};

// How a pattern is matched inside a larger grammar.
struct RegexMode {
  // JSON Schema's `pattern`: the pattern may match anywhere in the string; an end without its
  // anchor (^ at the start, $ at the end) may be preceded or followed by any characters.
  bool search = false;
  // The characters are a JSON string's unescaped ones: '"', '\' and U+0000..U+001F are taken
  // out of every class and `.`; a literal one is refused.
  bool json_string = false;
};

// InvalidArgument "line 1, column C: ..." for what is refused.
absl::StatusOr<Grammar> ParseRegex(std::string_view pattern, const RegexLimits& limits = {});

// Adds to `builder` a rule matching `pattern` (whole unless mode.search) and returns it (JSON
// Schema's `pattern` inside a larger grammar). Errors as ParseRegex.
absl::StatusOr<int32_t> AddRegexRule(GrammarBuilder& builder, std::string_view pattern,
                                     const RegexLimits& limits = {}, const RegexMode& mode = {});

}  // namespace kvserve::constraint
