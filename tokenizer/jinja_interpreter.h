// Renders a parsed Jinja template against global variables.
#pragma once

#include <string>

#include "tokenizer/jinja_ast.h"

namespace kvserve::tokenizer::jinja {

class RenderMeter;

// Renders `tmpl` with the items of `globals` (a dict) as variables, plus namespace(), range()
// and raise_exception(). Throws JinjaError naming the construct on unsupported operations,
// type errors, raise_exception() and any limit of `meter`'s budget exceeded (integer overflow
// and division by zero included); throws RenderInterrupted when its deadline passes or its
// caller cancels.
std::string Render(const Template& tmpl, const Value& globals, RenderMeter& meter);

}  // namespace kvserve::tokenizer::jinja
