// Values of the Jinja subset used by chat templates.
#include "tokenizer/jinja_value.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <limits>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "tokenizer/jinja_meter.h"
#include "tokenizer/unicode_utils.h"

namespace kvserve::tokenizer::jinja {
namespace {

// Python's repr of a float: the shortest digits that read back as `d`, in positional notation
// for decimal exponents in [-4, 16) (with ".0" when integral), else as "1.5e+16" / "1e-05".
std::string FloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  // Shortest round-trip digits as "-d.ddde+XX".
  const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  const std::string_view scientific(buf, static_cast<size_t>(end - buf));
  const size_t e = scientific.find('e');
  std::string out;
  std::string digits;
  for (char c : scientific.substr(0, e)) {
    if (c == '-') {
      out.push_back('-');
    } else if (c != '.') {
      digits.push_back(c);
    }
  }
  int exponent = 0;
  std::from_chars(scientific.data() + e + (scientific[e + 1] == '+' ? 2 : 1),
                  scientific.data() + scientific.size(), exponent);
  const int num_digits = static_cast<int>(digits.size());
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out.append("0.").append(static_cast<size_t>(-exponent - 1), '0').append(digits);
    } else if (num_digits <= exponent + 1) {
      out.append(digits).append(static_cast<size_t>(exponent + 1 - num_digits), '0').append(".0");
    } else {
      out.append(digits, 0, static_cast<size_t>(exponent + 1))
          .append(".")
          .append(digits, static_cast<size_t>(exponent + 1));
    }
    return out;
  }
  out.push_back(digits[0]);
  if (num_digits > 1) out.append(".").append(digits, 1);
  out.append(exponent < 0 ? "e-" : "e+");
  const int magnitude = exponent < 0 ? -exponent : exponent;
  if (magnitude < 10) out.push_back('0');
  absl::StrAppend(&out, magnitude);
  return out;
}

std::string PythonQuote(const std::string& s) {
  const char quote =
      s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, quote);
  for (char c : s) {
    switch (c) {
      case '\\':
        out.append("\\\\");
        break;
      case '\n':
        out.append("\\n");
        break;
      case '\r':
        out.append("\\r");
        break;
      case '\t':
        out.append("\\t");
        break;
      default:
        if (c == quote) out.push_back('\\');
        out.push_back(c);
    }
  }
  out.push_back(quote);
  return out;
}

void AppendHexEscape(uint32_t unit, std::string* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  out->append("\\u");
  for (int shift = 12; shift >= 0; shift -= 4) out->push_back(kHex[(unit >> shift) & 15]);
}

// A JSON string literal as Python's json.dumps writes it: the short escapes for quote,
// backslash, \b \f \n \r \t, \u00XX for other control characters and, with `ensure_ascii`,
// \uXXXX (surrogate pairs past U+FFFF) for everything outside ' '..'~'.
void AppendJsonString(const std::string& s, bool ensure_ascii, std::string* out) {
  out->push_back('"');
  for (size_t pos = 0; pos < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[pos]);
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      case '\b':
        out->append("\\b");
        break;
      case '\f':
        out->append("\\f");
        break;
      default:
        if (c < 0x20) {
          AppendHexEscape(c, out);
        } else if (c < 0x7f || !ensure_ascii) {
          out->push_back(static_cast<char>(c));
        } else {
          // An invalid byte decodes as U+FFFD.
          const char32_t cp = DecodeUtf8(s, &pos);
          if (cp >= 0x10000) {
            AppendHexEscape(0xD800 + ((cp - 0x10000) >> 10), out);
            AppendHexEscape(0xDC00 + ((cp - 0x10000) & 0x3FF), out);
          } else {
            AppendHexEscape(cp, out);
          }
          continue;
        }
    }
    ++pos;
  }
  out->push_back('"');
}

}  // namespace

const Value* Object::Find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Object::Set(const std::string& key, Value value) {
  for (auto& [k, v] : items) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(key, std::move(value));
}

Value MakeObject(std::vector<std::pair<std::string, Value>> items, bool is_namespace) {
  auto object = std::make_shared<Object>();
  object->items = std::move(items);
  object->is_namespace = is_namespace;
  return Value(std::move(object));
}

Value MakeCallable(Callable callable) {
  return Value(std::make_shared<Callable>(std::move(callable)));
}

Value::~Value() {
  if (!is_array() && !is_object()) return;
  // Containers nested inside this one are destroyed here, one at a time, instead of by the
  // recursive destructors of std::vector and std::shared_ptr.
  std::vector<Value> pending;
  try {
    DetachNestedContainers(&pending);
    while (!pending.empty()) {
      Value next = std::move(pending.back());
      pending.pop_back();
      next.DetachNestedContainers(&pending);
    }
  } catch (...) {  // out of memory for `pending`: the rest is destroyed recursively
  }
}

Value& Value::operator=(const Value& other) {
  if (this != &other) *this = Value(other);
  return *this;
}

Value& Value::operator=(Value&& other) noexcept {
  if (this != &other) {
    Value old(std::move(*this));  // destroyed through ~Value, after `other` is taken
    data_ = std::move(other.data_);
  }
  return *this;
}

void Value::DetachNestedContainers(std::vector<Value>* pending) {
  auto detach = [pending](Value& child) {
    if (child.is_array() || child.is_object()) pending->push_back(std::move(child));
  };
  if (auto* array = std::get_if<std::shared_ptr<Array>>(&data_)) {
    if (*array != nullptr && array->use_count() == 1) {
      for (Value& child : **array) detach(child);
    }
  } else if (auto* object = std::get_if<std::shared_ptr<Object>>(&data_)) {
    if (*object != nullptr && object->use_count() == 1) {
      for (auto& [key, child] : (*object)->items) detach(child);
    }
  }
}

Value Value::FromJson(const nlohmann::ordered_json& json, int max_depth, int level) {
  return FromJsonAt(json, level, max_depth);
}

Value Value::FromJsonAt(const nlohmann::ordered_json& json, int depth, int max_depth) {
  if (depth > max_depth && (json.is_array() || json.is_object())) {
    throw JinjaError(absl::StrCat("context nested deeper than ", max_depth, " levels"));
  }
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::None();
    case nlohmann::ordered_json::value_t::boolean:
      return Value(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const auto u = json.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return Value(static_cast<double>(u));
      return Value(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Value(json.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      Array array;
      array.reserve(json.size());
      for (const auto& item : json) array.push_back(FromJsonAt(item, depth + 1, max_depth));
      return Value(std::move(array));
    }
    case nlohmann::ordered_json::value_t::object: {
      std::vector<std::pair<std::string, Value>> items;
      for (const auto& [k, v] : json.items())
        items.emplace_back(k, FromJsonAt(v, depth + 1, max_depth));
      return MakeObject(std::move(items));
    }
    default:
      return Value::None();
  }
}

bool Value::Truthy() const {
  if (is_undefined() || is_none()) return false;
  if (is_bool()) return as_bool();
  if (is_int()) return as_int() != 0;
  if (is_float()) return std::get<double>(data_) != 0.0;
  if (is_string()) return !as_string().empty();
  if (is_array()) return !as_array().empty();
  if (is_object()) return is_object() && (as_object().is_namespace || !as_object().items.empty());
  return true;
}

std::string Value::ToString(RenderMeter& meter) const {
  if (is_undefined()) return "";
  if (is_string()) return as_string();
  return Repr(meter);
}

std::string Value::Repr(RenderMeter& meter) const {
  std::string out;
  AppendRepr(1, meter, &out);
  return out;
}

void Value::AppendRepr(int depth, RenderMeter& meter, std::string* out) const {
  meter.ChargeItems(1);
  if (is_undefined()) {
  } else if (is_none()) {
    out->append("None");
  } else if (is_bool()) {
    out->append(as_bool() ? "True" : "False");
  } else if (is_int()) {
    absl::StrAppend(out, as_int());
  } else if (is_float()) {
    out->append(FloatRepr(std::get<double>(data_)));
  } else if (is_string()) {
    meter.CheckString(static_cast<int64_t>(out->size() + as_string().size()));
    meter.ChargeBytes(static_cast<int64_t>(as_string().size()));
    out->append(PythonQuote(as_string()));
  } else if (is_array()) {
    meter.CheckValueDepth(depth);
    out->push_back('[');
    const Array& array = as_array();
    for (size_t i = 0; i < array.size(); ++i) {
      if (i > 0) out->append(", ");
      array[i].AppendRepr(depth + 1, meter, out);
    }
    out->push_back(']');
  } else if (is_object()) {
    meter.CheckValueDepth(depth);
    out->append(as_object().is_namespace ? "<Namespace {" : "{");
    bool first = true;
    for (const auto& [k, v] : as_object().items) {
      if (!first) out->append(", ");
      first = false;
      meter.CheckString(static_cast<int64_t>(out->size() + k.size()));
      out->append(PythonQuote(k)).append(": ");
      v.AppendRepr(depth + 1, meter, out);
    }
    out->append(as_object().is_namespace ? "}>" : "}");
  } else {
    out->append("<function>");
  }
  meter.CheckString(static_cast<int64_t>(out->size()));
}

std::string Value::ToJson(const JsonFormat& format, RenderMeter& meter) const {
  std::string out;
  AppendJson(format, 0, meter, &out);
  return out;
}

void Value::AppendJson(const JsonFormat& format, int depth, RenderMeter& meter,
                       std::string* out) const {
  meter.ChargeItems(1);
  auto append = [&](const std::string& text) {
    meter.CheckString(static_cast<int64_t>(out->size() + text.size()));
    meter.ChargeBytes(static_cast<int64_t>(text.size()));
    out->append(text);
  };
  auto newline = [&](int d) {
    if (!format.indent.has_value()) return;
    // indent.size() <= max_output_bytes and d <= max_depth: no overflow.
    const int64_t bytes = static_cast<int64_t>(format.indent->size()) * d;
    meter.CheckString(static_cast<int64_t>(out->size()) + 1 + bytes);
    meter.ChargeBytes(bytes);
    out->push_back('\n');
    for (int i = 0; i < d; ++i) out->append(*format.indent);
  };
  auto append_string = [&](const std::string& s) {
    meter.CheckString(static_cast<int64_t>(out->size() + s.size()));
    meter.ChargeBytes(static_cast<int64_t>(s.size()));
    AppendJsonString(s, format.ensure_ascii, out);
  };
  if (is_undefined() || is_none()) {
    out->append("null");
  } else if (is_bool()) {
    out->append(as_bool() ? "true" : "false");
  } else if (is_int()) {
    absl::StrAppend(out, as_int());
  } else if (is_float()) {
    const double d = std::get<double>(data_);
    out->append(std::isnan(d)   ? "NaN"
                : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity")
                                : FloatRepr(d));
  } else if (is_string()) {
    append_string(as_string());
  } else if (is_array()) {
    meter.CheckValueDepth(depth + 1);
    const Array& array = as_array();
    out->push_back('[');
    for (size_t i = 0; i < array.size(); ++i) {
      if (i > 0) append(format.item_separator);
      newline(depth + 1);
      array[i].AppendJson(format, depth + 1, meter, out);
    }
    if (!array.empty()) newline(depth);
    out->push_back(']');
  } else if (is_object()) {
    meter.CheckValueDepth(depth + 1);
    const auto& items = as_object().items;
    std::vector<const std::pair<std::string, Value>*> members;
    members.reserve(items.size());
    for (const auto& item : items) members.push_back(&item);
    if (format.sort_keys) {
      meter.ChargeItems(static_cast<int64_t>(members.size()) *
                        (1 + static_cast<int64_t>(std::bit_width(members.size()))));
      // Byte order of UTF-8 is code point order.
      std::stable_sort(members.begin(), members.end(),
                       [](const auto* a, const auto* b) { return a->first < b->first; });
    }
    out->push_back('{');
    for (size_t i = 0; i < members.size(); ++i) {
      if (i > 0) append(format.item_separator);
      newline(depth + 1);
      append_string(members[i]->first);
      append(format.key_separator);
      members[i]->second.AppendJson(format, depth + 1, meter, out);
    }
    if (!members.empty()) newline(depth);
    out->push_back('}');
  } else {
    throw JinjaError("tojson: a function is not JSON serializable");
  }
  meter.CheckString(static_cast<int64_t>(out->size()));
}

bool Value::Equals(const Value& other, RenderMeter& meter) const {
  return EqualsAt(other, 1, meter);
}

bool Value::EqualsAt(const Value& other, int depth, RenderMeter& meter) const {
  meter.ChargeItems(1);
  if (is_number() && other.is_number()) {
    if (is_int() && other.is_int()) return as_int() == other.as_int();
    return as_number() == other.as_number();
  }
  if (is_bool() && other.is_bool()) return as_bool() == other.as_bool();
  if (is_bool() && other.is_number()) return (as_bool() ? 1.0 : 0.0) == other.as_number();
  if (is_number() && other.is_bool()) return other.EqualsAt(*this, depth, meter);
  if (is_string() && other.is_string()) {
    meter.ChargeBytes(static_cast<int64_t>(std::min(as_string().size(), other.as_string().size())));
    return as_string() == other.as_string();
  }
  if (is_none() && other.is_none()) return true;
  if (is_undefined() && other.is_undefined()) return true;
  if (is_array() && other.is_array()) {
    meter.CheckValueDepth(depth);
    const Array& a = as_array();
    const Array& b = other.as_array();
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!a[i].EqualsAt(b[i], depth + 1, meter)) return false;
    }
    return true;
  }
  if (is_object() && other.is_object()) {
    meter.CheckValueDepth(depth);
    const auto& a = as_object().items;
    const auto& b = other.as_object().items;
    if (a.size() != b.size()) return false;
    meter.ChargeItems(static_cast<int64_t>(a.size() * b.size()));  // Find is linear
    for (const auto& [k, v] : a) {
      const Value* w = other.as_object().Find(k);
      if (w == nullptr || !v.EqualsAt(*w, depth + 1, meter)) return false;
    }
    return true;
  }
  return false;
}

std::string Value::TypeName() const {
  if (is_undefined()) return "undefined";
  if (is_none()) return "none";
  if (is_bool()) return "boolean";
  if (is_int()) return "integer";
  if (is_float()) return "float";
  if (is_string()) return "string";
  if (is_array()) return "list";
  if (is_object()) return as_object().is_namespace ? "namespace" : "dict";
  return "function";
}

}  // namespace kvserve::tokenizer::jinja
