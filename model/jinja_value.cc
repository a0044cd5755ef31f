// Values of the Jinja subset used by chat templates.
#include "model/jinja_value.h"

#include <nlohmann/json.hpp>

#include <charconv>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace kvserve::model::jinja {
namespace {

std::string FloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), d);
  std::string s(buf, end);
  if (s.find_first_of(".eEn") == std::string::npos) s.append(".0");
  return s;
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

void AppendJsonString(const std::string& s, std::string* out) {
  out->push_back('"');
  for (unsigned char c : s) {
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
          static constexpr char kHex[] = "0123456789abcdef";
          out->append("\\u00");
          out->push_back(kHex[c >> 4]);
          out->push_back(kHex[c & 15]);
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
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

Value Value::FromJson(const nlohmann::json& json) {
  switch (json.type()) {
    case nlohmann::json::value_t::null:
      return Value::None();
    case nlohmann::json::value_t::boolean:
      return Value(json.get<bool>());
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
      return Value(json.get<int64_t>());
    case nlohmann::json::value_t::number_float:
      return Value(json.get<double>());
    case nlohmann::json::value_t::string:
      return Value(json.get<std::string>());
    case nlohmann::json::value_t::array: {
      Array array;
      array.reserve(json.size());
      for (const auto& item : json) array.push_back(FromJson(item));
      return Value(std::move(array));
    }
    case nlohmann::json::value_t::object: {
      std::vector<std::pair<std::string, Value>> items;
      for (const auto& [k, v] : json.items()) items.emplace_back(k, FromJson(v));
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

std::string Value::ToString() const {
  if (is_undefined()) return "";
  if (is_string()) return as_string();
  return Repr();
}

std::string Value::Repr() const {
  if (is_undefined()) return "";
  if (is_none()) return "None";
  if (is_bool()) return as_bool() ? "True" : "False";
  if (is_int()) return absl::StrCat(as_int());
  if (is_float()) return FloatRepr(std::get<double>(data_));
  if (is_string()) return PythonQuote(as_string());
  if (is_array()) {
    std::string out = "[";
    const Array& array = as_array();
    for (size_t i = 0; i < array.size(); ++i) {
      if (i > 0) out.append(", ");
      out.append(array[i].Repr());
    }
    return out + "]";
  }
  if (is_object()) {
    std::string out = as_object().is_namespace ? "<Namespace {" : "{";
    bool first = true;
    for (const auto& [k, v] : as_object().items) {
      if (!first) out.append(", ");
      first = false;
      out.append(PythonQuote(k)).append(": ").append(v.Repr());
    }
    return out + (as_object().is_namespace ? "}>" : "}");
  }
  return "<function>";
}

std::string Value::ToJson(int indent) const {
  std::string out;
  AppendJson(indent, 0, &out);
  return out;
}

void Value::AppendJson(int indent, int depth, std::string* out) const {
  auto newline = [&](int d) {
    out->push_back('\n');
    out->append(static_cast<size_t>(indent * d), ' ');
  };
  if (is_undefined() || is_none()) {
    out->append("null");
  } else if (is_bool()) {
    out->append(as_bool() ? "true" : "false");
  } else if (is_int()) {
    out->append(absl::StrCat(as_int()));
  } else if (is_float()) {
    const double d = std::get<double>(data_);
    out->append(std::isnan(d)   ? "NaN"
                : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity")
                                : FloatRepr(d));
  } else if (is_string()) {
    AppendJsonString(as_string(), out);
  } else if (is_array()) {
    const Array& array = as_array();
    out->push_back('[');
    for (size_t i = 0; i < array.size(); ++i) {
      if (i > 0) out->append(indent >= 0 ? "," : ", ");
      if (indent >= 0) newline(depth + 1);
      array[i].AppendJson(indent, depth + 1, out);
    }
    if (indent >= 0 && !array.empty()) newline(depth);
    out->push_back(']');
  } else if (is_object()) {
    out->push_back('{');
    bool first = true;
    for (const auto& [k, v] : as_object().items) {
      if (!first) out->append(indent >= 0 ? "," : ", ");
      first = false;
      if (indent >= 0) newline(depth + 1);
      AppendJsonString(k, out);
      out->append(": ");
      v.AppendJson(indent, depth + 1, out);
    }
    if (indent >= 0 && !as_object().items.empty()) newline(depth);
    out->push_back('}');
  } else {
    throw JinjaError("tojson: a function is not JSON serializable");
  }
}

bool Value::Equals(const Value& other) const {
  if (is_number() && other.is_number()) {
    if (is_int() && other.is_int()) return as_int() == other.as_int();
    return as_number() == other.as_number();
  }
  if (is_bool() && other.is_bool()) return as_bool() == other.as_bool();
  if (is_bool() && other.is_number()) return (as_bool() ? 1.0 : 0.0) == other.as_number();
  if (is_number() && other.is_bool()) return other.Equals(*this);
  if (is_string() && other.is_string()) return as_string() == other.as_string();
  if (is_none() && other.is_none()) return true;
  if (is_undefined() && other.is_undefined()) return true;
  if (is_array() && other.is_array()) {
    const Array& a = as_array();
    const Array& b = other.as_array();
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!a[i].Equals(b[i])) return false;
    }
    return true;
  }
  if (is_object() && other.is_object()) {
    const auto& a = as_object().items;
    const auto& b = other.as_object().items;
    if (a.size() != b.size()) return false;
    for (const auto& [k, v] : a) {
      const Value* w = other.as_object().Find(k);
      if (w == nullptr || !v.Equals(*w)) return false;
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

}  // namespace kvserve::model::jinja
