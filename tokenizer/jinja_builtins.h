// Jinja filters, tests and methods (on strings, dicts and lists) of the chat-template subset.
#pragma once

#include <string>
#include <vector>

#include "tokenizer/jinja_value.h"

namespace kvserve::tokenizer::jinja {

class RenderMeter;

// Each function below charges `meter` for the work it does beyond a constant, and checks the
// size of every string or list it builds against the meter before allocating it (throwing
// JinjaError "string larger than N bytes" / "list larger than N bytes").

// Applies filter `name` to `value`. Throws JinjaError "unsupported filter 'name'" for filters
// outside the subset, or naming the bad argument.
Value ApplyFilter(const std::string& name, const Value& value, std::vector<Value>& args,
                  KwArgs& kwargs, RenderMeter& meter);

// Evaluates test `name` ("x is name(args)"). Throws JinjaError "unsupported test 'name'".
bool ApplyTest(const std::string& name, const Value& value, const std::vector<Value>& args,
               RenderMeter& meter);

// Calls method `name` of a string, dict or list. Throws JinjaError "unsupported method 'name'
// on <type>".
Value CallMethod(const Value& object, const std::string& name, std::vector<Value>& args,
                 KwArgs& kwargs, RenderMeter& meter);

// Python slicing value[start:stop:step] of a string (by code point) or list; null parts are
// omitted bounds.
Value SliceValue(const Value& value, const Value* start, const Value* stop, const Value* step,
                 RenderMeter& meter);

// The number of code points of UTF-8 `s` (a malformed byte counts as one).
int64_t CountCodePoints(const std::string& s);

}  // namespace kvserve::tokenizer::jinja
