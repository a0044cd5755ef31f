// JSON Schema (and "any JSON object") to a Grammar whose strings are JSON texts valid under
// the schema.
//
// Supported keywords: type (a name or an array of names), properties, required,
// additionalProperties (false, true or a schema), items (a schema, or false after
// prefixItems), prefixItems, minItems, maxItems, enum, const, anyOf, oneOf (as anyOf: its
// branches should exclude each other), allOf (one branch, or object branches whose
// properties merge), $ref to "#", "#/$defs/NAME" or "#/definitions/NAME" (recursion
// included), minLength, maxLength, pattern, format (date-time, date, time, uuid, email, ipv4,
// ipv6, uri), minimum, maximum, exclusiveMinimum, exclusiveMaximum (any integer bounds on
// integers; on numbers, integer-valued bounds >= 0). Annotations (title, description,
// default, examples, $schema, $id, $comment, deprecated, readOnly, writeOnly) are ignored.
// Any other keyword is refused with its JSON pointer: nothing is silently not enforced.
//
// What is generated is a subset of what the schema allows, always valid: properties in the
// schema's order; additional properties only for an object that lists none; strings that need
// no escape to match a `pattern` (a pattern's characters exclude '"', '\' and control
// characters); formats in a plain form (ipv6 as eight groups, uri as scheme://host/path, no
// February 29); numbers of at most 16 integer digits and a two-digit exponent (none within
// bounds).
// Whitespace: none between tokens by default (compact); with `whitespace_bytes` > 0, up to
// that many of space, tab, newline between tokens.
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"
#include "constraint/grammar.h"
#include "constraint/regex.h"

namespace kvserve::constraint {

struct JsonSchemaOptions {
  // Most whitespace bytes between two tokens; 0: compact.
  int64_t whitespace_bytes = 0;
  // Deepest nesting of schemas compiled (each subschema once; $ref recursion does not count).
  int64_t max_depth = 64;
  int64_t max_schema_bytes = 1 << 20;
  RegexLimits regex;
};

// `schema_json` is the schema's text. InvalidArgument naming the JSON pointer of what is
// refused ("at /properties/age/minimum: ..."), or the parse error.
absl::StatusOr<Grammar> JsonSchemaGrammar(std::string_view schema_json,
                                          const JsonSchemaOptions& options = {});

// Any JSON object (OpenAI's response_format json_object).
Grammar JsonObjectGrammar(const JsonSchemaOptions& options = {});

}  // namespace kvserve::constraint
