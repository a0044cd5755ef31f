// Small helpers shared by the model's JSON loaders (tokenizer.json components, config.json):
// type-checked field access that names the JSON path in errors, a nesting bound, whitespace
// stripping and the {"String"|"Regex"} replacer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tokenizer/unicode_regex.h"

namespace kvserve::tokenizer {

// Paths name a value inside its file the way errors print it: "model.vocab",
// "added_tokens[3].id". The file name is added by the loader that knows it.

// The kind of a JSON value as errors name it: null, boolean, integer, number (a float),
// string, array or object.
std::string_view JsonKind(const nlohmann::json& value);
// The same with an article, for messages that read "X is <kind>": "null", "an object", "an
// array", "a string", "a boolean", "an integer", "a float".
std::string_view JsonKindPhrase(const nlohmann::json& value);
// The path of member `key` of the value at `path` ("model" + "dropout" -> "model.dropout";
// a top-level member is just its key).
std::string JsonMemberPath(std::string_view path, std::string_view key);
// The path of element `index` of the array at `path` ("added_tokens" + 3 -> "added_tokens[3]").
std::string JsonElementPath(std::string_view path, size_t index);
// InvalidArgument "<path>: expected <expected>, got <kind>".
absl::Status JsonTypeError(std::string_view path, std::string_view expected,
                           const nlohmann::json& value);
// InvalidArgument "<path>: expected <expected>, got <kind>" unless `value` is an object.
absl::Status ExpectJsonObject(const nlohmann::json& value, std::string_view path);

// Type-checked reads of member `key` of `object` (the value at `path`). Each returns
// InvalidArgument "<path>.<key>: expected ..., got <kind>" for a value of the wrong type.

// A required string; a missing member is "<path>.<key>: missing, expected a string".
absl::StatusOr<std::string> GetString(const nlohmann::json& object, std::string_view key,
                                      std::string_view path);
// A required array or object member; a missing one is "<path>.<key>: missing, expected an
// array" ("an object"). The pointer is into `object`.
absl::StatusOr<const nlohmann::json*> GetArray(const nlohmann::json& object, std::string_view key,
                                               std::string_view path);
absl::StatusOr<const nlohmann::json*> GetObject(const nlohmann::json& object, std::string_view key,
                                                std::string_view path);
// An optional string: `default_value` when missing or null.
absl::StatusOr<std::string> GetOptionalString(const nlohmann::json& object, std::string_view key,
                                              std::string_view path, std::string default_value);
// An optional boolean: `default_value` when missing (null is a type error, as in the Rust
// tokenizers crate).
absl::StatusOr<bool> GetBool(const nlohmann::json& object, std::string_view key,
                             std::string_view path, bool default_value);
// An optional integer in [min, max]: `default_value` when missing; out of range is
// "<path>.<key>: must be in [min, max] (got N)".
absl::StatusOr<int64_t> GetInt(const nlohmann::json& object, std::string_view key,
                               std::string_view path, int64_t default_value, int64_t min,
                               int64_t max);
// An optional number: nullopt when missing or null.
absl::StatusOr<std::optional<double>> GetOptionalNumber(const nlohmann::json& object,
                                                        std::string_view key,
                                                        std::string_view path);
// `value` (at `path`) as an integer in [min, max]; the same errors as GetInt.
absl::StatusOr<int64_t> JsonToInt(const nlohmann::json& value, std::string_view path, int64_t min,
                                  int64_t max);

// How deeply a loader lets arrays and objects nest: real config and tokenizer files nest
// fewer than 10 levels, and the component parsers recurse once per level.
inline constexpr int kMaxJsonDepth = 64;
// OK when no value in the JSON text `text` is nested deeper than `max_depth` arrays and
// objects; otherwise InvalidArgument "nested deeper than <max_depth> levels". Malformed text
// is left for the parser to report.
absl::Status CheckJsonDepth(std::string_view text, int max_depth);

// Removes Unicode whitespace from the left and/or right end of `text`.
std::string_view StripWhitespace(std::string_view text, bool left, bool right);

// Replaces every occurrence of a literal string or regex by `content`.
class StringReplacer {
 public:
  // Reads {"pattern": {"String": s} | {"Regex": r}, "content": c}, the value at `path`;
  // InvalidArgument naming the path of the first bad field.
  static absl::StatusOr<StringReplacer> FromJson(const nlohmann::json& config,
                                                 std::string_view path);
  std::string Apply(std::string_view text) const;

 private:
  std::string literal_;
  std::shared_ptr<const UnicodeRegex> regex_;  // null for a literal pattern
  std::string content_;
};

}  // namespace kvserve::tokenizer
