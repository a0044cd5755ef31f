// Constraint: what a request asks its output to match (a JSON Schema, any JSON object, a regex,
// a GBNF grammar, one of N strings) and its compilation to a matcher's grammar.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "constraint/gbnf.h"
#include "constraint/grammar.h"
#include "constraint/json_schema.h"
#include "constraint/matcher.h"
#include "constraint/regex.h"

namespace kvserve::constraint {

struct ConstraintSpec {
  // kUnset: a protocol's constraint message that names no kind (refused).
  enum class Kind { kJsonSchema, kJsonObject, kRegex, kGrammar, kChoice, kUnset };
  Kind kind = Kind::kRegex;
  // kJsonSchema: the schema's JSON text; kRegex: the pattern; kGrammar: GBNF text.
  std::string text;
  std::vector<std::string> choices;  // kChoice: the strings, >= 1, each non-empty or not
  // kJsonSchema and kJsonObject: the most whitespace bytes between two tokens (0: compact), at
  // most ConstraintLimits::max_whitespace_bytes.
  int64_t whitespace_bytes = 0;
};

struct ConstraintLimits {
  GrammarLimits grammar;
  GbnfLimits gbnf;
  RegexLimits regex;
  JsonSchemaOptions json;  // kJsonSchema and kJsonObject (its regex limits are `regex`)
  int64_t max_choices = 10000;
  int64_t max_whitespace_bytes = 16;
};

// Compiles `spec`; InvalidArgument with the position or the reason for what is refused (the
// caller prefixes the request field's name).
absl::StatusOr<std::shared_ptr<const CompiledGrammar>> CompileConstraint(
    const ConstraintSpec& spec, const ConstraintLimits& limits = {});

// The kind's name as the protocols spell it ("json_schema", "json_object", "regex", "grammar",
// "choice"; "" for kUnset).
const char* ConstraintKindName(ConstraintSpec::Kind kind);

// A grammar matching exactly one of `choices` (an empty list is refused).
absl::StatusOr<Grammar> ChoiceGrammar(const std::vector<std::string>& choices,
                                      int64_t max_choices = 10000);

}  // namespace kvserve::constraint
