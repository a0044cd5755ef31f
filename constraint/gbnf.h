// ParseGbnf: llama.cpp's GBNF grammar syntax to a Grammar, so that users' grammars carry over.
//
// Accepted: rules `name ::= alternatives` (names of letters, digits, '-' and '_'; a rule's body
// runs until the next `name ::=`, so alternatives may continue on following lines); string
// literals "..." and character classes [...] / [^...] with escapes \n \r \t \\ \" \' \[ \] \-
// \xHH \uHHHH \UHHHHHHHH; `.` (any code point); groups ( ... ); the postfixes * + ? {m} {m,}
// {m,n}; comments from '#' to the end of the line. The whole output matches the rule `root`.
// Refused, naming line and column: a syntax error, a reference to an undefined rule, a rule
// defined twice, a repetition bound above GbnfLimits::max_repeat, token references <...>; and
// (ValidateGrammar, through CompiledGrammar) left recursion and rules that accept nothing.
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"
#include "constraint/grammar.h"

namespace kvserve::constraint {

struct GbnfLimits {
  int64_t max_repeat = 1000;  // the largest m or n of {m,n}
  int64_t max_text_bytes = 1 << 20;
};

// InvalidArgument "line L, column C: ..." for what is refused (see above).
absl::StatusOr<Grammar> ParseGbnf(std::string_view text, const GbnfLimits& limits = {});

}  // namespace kvserve::constraint
