// Parses Jinja template source (the subset chat templates use) into a syntax tree.
#pragma once

#include <memory>
#include <string_view>

#include "tokenizer/jinja_ast.h"

namespace kvserve::tokenizer::jinja {

// How deeply blocks ({% if %}, {% for %}, {% macro %}, {% set %}...{% endset %}) may nest, and
// how tall an expression tree may be (parentheses, brackets, calls, unary and binary operator
// chains). Parsing, rendering and destroying a template recurse once per level, so these bound
// the native stack; real chat templates stay under 10.
inline constexpr int kMaxParseNesting = 128;

// Parses `source` with trim_blocks and lstrip_blocks on (as Transformers renders chat
// templates). Throws JinjaError naming the construct and line for syntax errors, for statements
// outside the supported subset (e.g. "unsupported statement 'include' at line 3"), for nesting
// past kMaxParseNesting ("expression nested deeper than 128 levels at line 1") and for integer
// literals outside int64.
std::unique_ptr<Template> ParseTemplate(std::string_view source);

}  // namespace kvserve::tokenizer::jinja
