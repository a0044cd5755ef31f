// Jinja filters, tests and methods (on strings, dicts and lists) of the chat-template subset.
#ifndef KVSERVE_MODEL_JINJA_BUILTINS_H_
#define KVSERVE_MODEL_JINJA_BUILTINS_H_

#include <string>
#include <vector>

#include "model/jinja_value.h"

namespace kvserve::model::jinja {

// Applies filter `name` to `value`. Throws JinjaError "unsupported filter 'name'" for filters
// outside the subset, or naming the bad argument.
Value ApplyFilter(const std::string& name, const Value& value, std::vector<Value>& args,
                  KwArgs& kwargs);

// Evaluates test `name` ("x is name(args)"). Throws JinjaError "unsupported test 'name'".
bool ApplyTest(const std::string& name, const Value& value, const std::vector<Value>& args);

// Calls method `name` of a string, dict or list. Throws JinjaError "unsupported method 'name'
// on <type>".
Value CallMethod(const Value& object, const std::string& name, std::vector<Value>& args,
                 KwArgs& kwargs);

// Python slicing value[start:stop:step] of a string (by code point) or list; null parts are
// omitted bounds.
Value SliceValue(const Value& value, const Value* start, const Value* stop, const Value* step);

}  // namespace kvserve::model::jinja

#endif  // KVSERVE_MODEL_JINJA_BUILTINS_H_
