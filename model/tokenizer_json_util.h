// Small helpers shared by the tokenizer.json component parsers: typed field access, whitespace
// stripping and the {"String"|"Regex"} pattern replacer.
#ifndef KVSERVE_MODEL_TOKENIZER_JSON_UTIL_H_
#define KVSERVE_MODEL_TOKENIZER_JSON_UTIL_H_

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "absl/status/statusor.h"
#include "model/unicode_regex.h"

namespace kvserve::model {

// config[key] as a string; InvalidArgument "<context> needs a string '<key>'" otherwise.
absl::StatusOr<std::string> GetString(const nlohmann::json& config, std::string_view key,
                                      std::string_view context);

// Removes Unicode whitespace from the left and/or right end of `text`.
std::string_view StripWhitespace(std::string_view text, bool left, bool right);

// Replaces every occurrence of a literal string or regex by `content`.
class StringReplacer {
 public:
  // Reads {"pattern": {"String": s} | {"Regex": r}, "content": c}.
  static absl::StatusOr<StringReplacer> FromJson(const nlohmann::json& config,
                                                 std::string_view context);
  std::string Apply(std::string_view text) const;

 private:
  std::string literal_;
  std::shared_ptr<const UnicodeRegex> regex_;  // null for a literal pattern
  std::string content_;
};

}  // namespace kvserve::model

#endif  // KVSERVE_MODEL_TOKENIZER_JSON_UTIL_H_
