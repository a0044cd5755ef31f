// Parses Jinja template source (the subset chat templates use) into a syntax tree.
#ifndef KVSERVE_MODEL_JINJA_PARSER_H_
#define KVSERVE_MODEL_JINJA_PARSER_H_

#include <memory>
#include <string_view>

#include "model/jinja_ast.h"

namespace kvserve::model::jinja {

// Parses `source` with trim_blocks and lstrip_blocks on (as Transformers renders chat
// templates). Throws JinjaError naming the construct and line for syntax errors and for
// statements outside the supported subset (e.g. "unsupported statement 'include' at line 3").
std::unique_ptr<Template> ParseTemplate(std::string_view source);

}  // namespace kvserve::model::jinja

#endif  // KVSERVE_MODEL_JINJA_PARSER_H_
