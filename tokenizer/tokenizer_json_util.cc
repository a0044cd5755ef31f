// Small helpers shared by the model's JSON loaders (tokenizer.json components, config.json).
#include "tokenizer/tokenizer_json_util.h"

#include <nlohmann/json.hpp>

#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tokenizer/unicode_utils.h"

namespace kvserve::tokenizer {
namespace {

using Json = nlohmann::json;

// The error for a member that is required but missing.
std::string MissingError(std::string_view path, std::string_view expected) {
  return absl::StrCat(AsAbsl(path), ": missing, expected ", AsAbsl(expected));
}

}  // namespace

std::string_view JsonKind(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return "boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return "integer";
    case Json::value_t::number_float:
      return "number";
    case Json::value_t::string:
      return "string";
    case Json::value_t::array:
      return "array";
    case Json::value_t::object:
      return "object";
    default:
      return "binary";
  }
}

std::string_view JsonKindPhrase(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::object:
      return "an object";
    case Json::value_t::array:
      return "an array";
    case Json::value_t::string:
      return "a string";
    case Json::value_t::boolean:
      return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return "an integer";
    case Json::value_t::number_float:
      return "a float";
    default:
      return "an unsupported value";
  }
}

std::string JsonMemberPath(std::string_view path, std::string_view key) {
  if (path.empty()) return std::string(key);
  return absl::StrCat(AsAbsl(path), ".", AsAbsl(key));
}

std::string JsonElementPath(std::string_view path, size_t index) {
  return absl::StrCat(AsAbsl(path), "[", index, "]");
}

absl::Status JsonTypeError(std::string_view path, std::string_view expected, const Json& value) {
  return absl::InvalidArgumentError(absl::StrCat(AsAbsl(path), ": expected ", AsAbsl(expected),
                                                 ", got ", AsAbsl(JsonKind(value))));
}

absl::Status ExpectJsonObject(const Json& value, std::string_view path) {
  if (value.is_object()) return absl::OkStatus();
  return JsonTypeError(path, "an object", value);
}

absl::StatusOr<std::string> GetString(const Json& object, std::string_view key,
                                      std::string_view path) {
  const std::string member = JsonMemberPath(path, key);
  auto it = object.find(key);
  if (it == object.end()) return absl::InvalidArgumentError(MissingError(member, "a string"));
  if (!it->is_string()) return JsonTypeError(member, "a string", *it);
  return it->get<std::string>();
}

absl::StatusOr<const Json*> GetArray(const Json& object, std::string_view key,
                                     std::string_view path) {
  const std::string member = JsonMemberPath(path, key);
  auto it = object.find(key);
  if (it == object.end()) return absl::InvalidArgumentError(MissingError(member, "an array"));
  if (!it->is_array()) return JsonTypeError(member, "an array", *it);
  return &*it;
}

absl::StatusOr<const Json*> GetObject(const Json& object, std::string_view key,
                                      std::string_view path) {
  const std::string member = JsonMemberPath(path, key);
  auto it = object.find(key);
  if (it == object.end()) return absl::InvalidArgumentError(MissingError(member, "an object"));
  if (!it->is_object()) return JsonTypeError(member, "an object", *it);
  return &*it;
}

absl::StatusOr<std::string> GetOptionalString(const Json& object, std::string_view key,
                                              std::string_view path, std::string default_value) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return default_value;
  if (!it->is_string()) return JsonTypeError(JsonMemberPath(path, key), "a string or null", *it);
  return it->get<std::string>();
}

absl::StatusOr<bool> GetBool(const Json& object, std::string_view key, std::string_view path,
                             bool default_value) {
  auto it = object.find(key);
  if (it == object.end()) return default_value;
  if (!it->is_boolean()) return JsonTypeError(JsonMemberPath(path, key), "a boolean", *it);
  return it->get<bool>();
}

absl::StatusOr<int64_t> JsonToInt(const Json& value, std::string_view path, int64_t min,
                                  int64_t max) {
  if (!value.is_number_integer()) return JsonTypeError(path, "an integer", value);
  // Compared in the type nlohmann holds, so that 2^64 - 1 is not read as -1.
  const bool in_range = value.is_number_unsigned()
                            ? max >= 0 && value.get<uint64_t>() <= static_cast<uint64_t>(max) &&
                                  (min <= 0 || value.get<uint64_t>() >= static_cast<uint64_t>(min))
                            : value.get<int64_t>() >= min && value.get<int64_t>() <= max;
  if (!in_range) {
    return absl::InvalidArgumentError(
        absl::StrCat(AsAbsl(path), ": must be in [", min, ", ", max, "] (got ", value.dump(), ")"));
  }
  return value.get<int64_t>();
}

absl::StatusOr<int64_t> GetInt(const Json& object, std::string_view key, std::string_view path,
                               int64_t default_value, int64_t min, int64_t max) {
  auto it = object.find(key);
  if (it == object.end()) return default_value;
  return JsonToInt(*it, JsonMemberPath(path, key), min, max);
}

absl::StatusOr<std::optional<double>> GetOptionalNumber(const Json& object, std::string_view key,
                                                        std::string_view path) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return std::optional<double>();
  if (!it->is_number()) return JsonTypeError(JsonMemberPath(path, key), "a number or null", *it);
  return std::optional<double>(it->get<double>());
}

absl::Status CheckJsonDepth(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character cannot end the string
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        return absl::InvalidArgumentError(
            absl::StrCat("nested deeper than ", max_depth, " levels"));
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return absl::OkStatus();
}

std::string_view StripWhitespace(std::string_view text, bool left, bool right) {
  if (left) {
    size_t pos = 0;
    while (pos < text.size()) {
      size_t next = pos;
      if (!IsUnicodeWhitespace(DecodeUtf8(text, &next))) break;
      pos = next;
    }
    text.remove_prefix(pos);
  }
  if (right) {
    while (!text.empty()) {
      size_t start = text.size() - 1;
      while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
      size_t pos = start;
      if (!IsUnicodeWhitespace(DecodeUtf8(text, &pos)) || pos != text.size()) break;
      text.remove_suffix(text.size() - start);
    }
  }
  return text;
}

absl::StatusOr<StringReplacer> StringReplacer::FromJson(const Json& config, std::string_view path) {
  if (absl::Status s = ExpectJsonObject(config, path); !s.ok()) return s;
  StringReplacer replacer;
  auto content = GetString(config, "content", path);
  if (!content.ok()) return content.status();
  replacer.content_ = *std::move(content);
  const std::string pattern_path = JsonMemberPath(path, "pattern");
  auto pattern = GetObject(config, "pattern", path);
  if (!pattern.ok()) return pattern.status();
  if ((*pattern)->contains("String")) {
    auto literal = GetString(**pattern, "String", pattern_path);
    if (!literal.ok()) return literal.status();
    if (literal->empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(JsonMemberPath(pattern_path, "String"), ": must not be empty"));
    }
    replacer.literal_ = *std::move(literal);
    return replacer;
  }
  if ((*pattern)->contains("Regex")) {
    auto source = GetString(**pattern, "Regex", pattern_path);
    if (!source.ok()) return source.status();
    auto regex = UnicodeRegex::Create(*source);
    if (!regex.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(JsonMemberPath(pattern_path, "Regex"), ": ", regex.status().message()));
    }
    replacer.regex_ = std::shared_ptr<const UnicodeRegex>(*std::move(regex));
    return replacer;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(pattern_path, ": expected {\"String\": ...} or {\"Regex\": ...}"));
}

std::string StringReplacer::Apply(std::string_view text) const {
  std::string out;
  out.reserve(text.size());
  if (regex_ == nullptr) {
    size_t pos = 0;
    while (true) {
      const size_t found = text.find(literal_, pos);
      if (found == std::string_view::npos) break;
      out.append(text.substr(pos, found - pos));
      out.append(content_);
      pos = found + literal_.size();
    }
    out.append(text.substr(pos));
    return out;
  }
  std::vector<std::pair<size_t, size_t>> matches;
  regex_->FindAll(text, &matches);
  size_t pos = 0;
  for (const auto& [begin, end] : matches) {
    out.append(text.substr(pos, begin - pos));
    out.append(content_);
    pos = end;
  }
  out.append(text.substr(pos));
  return out;
}

}  // namespace kvserve::tokenizer
