// JSON text read straight into template values, keeping the order of object members.
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "tokenizer/jinja_value.h"

namespace kvserve::tokenizer::jinja {

// The value of JSON `text`, each object's members in the order the text writes them (as Python's
// json.loads and JavaScript's JSON.parse keep them); a repeated key keeps its first position and
// takes its last value. Numbers: integers in int64 range are ints, others floats. Errors, all
// InvalidArgument: "not valid JSON: <reason, with line and column>" (the text is not quoted back,
// but for a number too large for a double, cut at 200 bytes), "nested deeper than <max_depth>
// levels" when lists and objects nest deeper than `max_depth` (the outermost one is level 1). Time
// and memory are linear in the text; nothing recurses, however deep the text nests.
absl::StatusOr<Value> ParseJsonValue(std::string_view text, int max_depth);

}  // namespace kvserve::tokenizer::jinja
