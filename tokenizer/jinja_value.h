// Values of the Jinja subset used by chat templates: Python-like none/bool/int/float/str/list/
// dict (keeping insertion order, as Python's dict does), plus callables (macros, namespace(),
// range(), raise_exception()).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace kvserve::tokenizer::jinja {

// Raised while parsing or rendering; converted to absl::Status at the ChatTemplate boundary.
class JinjaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class RenderMeter;
class Value;
using Array = std::vector<Value>;
struct Object;
using KwArgs = std::vector<std::pair<std::string, Value>>;
using Callable = std::function<Value(std::vector<Value>& args, KwArgs& kwargs)>;

struct Undefined {
  std::string name;  // what was looked up, for error messages
};

// The options of Python's json.dumps that Transformers' tojson filter passes through
// (`tojson(ensure_ascii=False, indent=None, separators=None, sort_keys=False)`).
struct JsonFormat {
  // Unset: everything on one line. Set: each list item and dict member on its own line,
  // preceded by this string once per nesting level (json.dumps' indent=N is N spaces).
  std::optional<std::string> indent;
  // Non-ASCII characters (and DEL) as \uXXXX escapes, astral ones as surrogate pairs.
  bool ensure_ascii = false;
  // Between items and between a key and its value; json.dumps' defaults are ", " and ": ",
  // and "," and ": " when indented.
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  // Dict members sorted by key (code point order, as Python sorts str); else insertion order.
  bool sort_keys = false;
};

// Destroying a value never recurses deeper than a few frames, however deeply its lists and dicts
// nest: the last owner of a container takes its nested containers apart iteratively.
class Value {
 public:
  Value() : data_(Undefined{}) {}
  Value(const Value& other) = default;
  Value(Value&& other) noexcept = default;
  Value& operator=(const Value& other);
  Value& operator=(Value&& other) noexcept;
  ~Value();
  static Value None() { return Value(nullptr); }
  Value(std::nullptr_t) : data_(nullptr) {}
  Value(bool b) : data_(b) {}
  Value(int64_t i) : data_(i) {}
  Value(int i) : data_(static_cast<int64_t>(i)) {}
  Value(double d) : data_(d) {}
  Value(std::string s) : data_(std::move(s)) {}
  Value(const char* s) : data_(std::string(s)) {}
  Value(Array a) : data_(std::make_shared<Array>(std::move(a))) {}
  Value(std::shared_ptr<Object> o) : data_(std::move(o)) {}
  Value(std::shared_ptr<Callable> c) : data_(std::move(c)) {}
  static Value MakeUndefined(std::string name) {
    Value v;
    v.data_ = Undefined{std::move(name)};
    return v;
  }
  // The JSON value as a Value, dict members in the order `json` holds them. Throws JinjaError
  // "context nested deeper than <max_depth> levels" when `json`, itself at nesting level
  // `level` (1: the outermost), nests deeper than `max_depth`.
  static Value FromJson(const nlohmann::ordered_json& json, int max_depth, int level = 1);

  bool is_undefined() const { return std::holds_alternative<Undefined>(data_); }
  bool is_none() const { return std::holds_alternative<std::nullptr_t>(data_); }
  bool is_bool() const { return std::holds_alternative<bool>(data_); }
  bool is_int() const { return std::holds_alternative<int64_t>(data_); }
  bool is_float() const { return std::holds_alternative<double>(data_); }
  bool is_number() const { return is_int() || is_float(); }
  bool is_string() const { return std::holds_alternative<std::string>(data_); }
  bool is_array() const { return std::holds_alternative<std::shared_ptr<Array>>(data_); }
  bool is_object() const { return std::holds_alternative<std::shared_ptr<Object>>(data_); }
  bool is_callable() const { return std::holds_alternative<std::shared_ptr<Callable>>(data_); }

  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const { return std::get<int64_t>(data_); }
  double as_number() const {
    return is_int() ? static_cast<double>(as_int()) : std::get<double>(data_);
  }
  const std::string& as_string() const { return std::get<std::string>(data_); }
  Array& as_array() const { return *std::get<std::shared_ptr<Array>>(data_); }
  Object& as_object() const { return *std::get<std::shared_ptr<Object>>(data_); }
  Callable& as_callable() const { return *std::get<std::shared_ptr<Callable>>(data_); }
  const std::string& undefined_name() const { return std::get<Undefined>(data_).name; }

  // Python truthiness (undefined is false).
  bool Truthy() const;
  // The functions below walk nested lists and dicts: they charge `meter` for each value visited
  // and each byte built, and throw JinjaError past its max_depth nesting or max_output_bytes.
  // Python str(): None, True, 1.5, ['a', 1], {'k': 'v'}; undefined is "".
  std::string ToString(RenderMeter& meter) const;
  // Python repr() (strings quoted).
  std::string Repr(RenderMeter& meter) const;
  // Python json.dumps with `format` (dicts in insertion order unless format.sort_keys); undefined
  // is null. Throws JinjaError for a function.
  std::string ToJson(const JsonFormat& format, RenderMeter& meter) const;
  // Python ==.
  bool Equals(const Value& other, RenderMeter& meter) const;
  // Name of the type for error messages.
  std::string TypeName() const;

 private:
  static Value FromJsonAt(const nlohmann::ordered_json& json, int depth, int max_depth);
  void AppendRepr(int depth, RenderMeter& meter, std::string* out) const;
  void AppendJson(const JsonFormat& format, int depth, RenderMeter& meter, std::string* out) const;
  bool EqualsAt(const Value& other, int depth, RenderMeter& meter) const;
  // When this value is the last owner of a list or dict, moves the lists and dicts inside it
  // to `pending` so that destroying it does not recurse into them.
  void DetachNestedContainers(std::vector<Value>* pending);
  std::variant<Undefined, std::nullptr_t, bool, int64_t, double, std::string,
               std::shared_ptr<Array>, std::shared_ptr<Object>, std::shared_ptr<Callable>>
      data_;
};

// An insertion-ordered string-keyed dict (also the type of namespace() objects).
struct Object {
  std::vector<std::pair<std::string, Value>> items;
  bool is_namespace = false;
  const Value* Find(std::string_view key) const;
  void Set(const std::string& key, Value value);
};

Value MakeObject(std::vector<std::pair<std::string, Value>> items, bool is_namespace = false);
Value MakeCallable(Callable callable);

}  // namespace kvserve::tokenizer::jinja
