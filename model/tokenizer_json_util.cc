// Small helpers shared by the tokenizer.json component parsers.
#include "model/tokenizer_json_util.h"

#include <nlohmann/json.hpp>

#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model/unicode_utils.h"

namespace kvserve::model {

absl::StatusOr<std::string> GetString(const nlohmann::json& config, std::string_view key,
                                      std::string_view context) {
  auto it = config.find(key);
  if (it == config.end() || !it->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(AsAbsl(context), " needs a string '", AsAbsl(key), "'"));
  }
  return it->get<std::string>();
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

absl::StatusOr<StringReplacer> StringReplacer::FromJson(const nlohmann::json& config,
                                                        std::string_view context) {
  StringReplacer replacer;
  auto content = GetString(config, "content", context);
  if (!content.ok()) return content.status();
  replacer.content_ = *std::move(content);
  auto pattern = config.find("pattern");
  if (pattern == config.end() || !pattern->is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(AsAbsl(context), " needs a 'pattern' object"));
  }
  if (auto s = pattern->find("String"); s != pattern->end() && s->is_string()) {
    replacer.literal_ = s->get<std::string>();
    if (replacer.literal_.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(AsAbsl(context), " has an empty String pattern"));
    }
    return replacer;
  }
  if (auto r = pattern->find("Regex"); r != pattern->end() && r->is_string()) {
    auto regex = UnicodeRegex::Create(r->get<std::string>());
    if (!regex.ok()) return regex.status();
    replacer.regex_ = std::shared_ptr<const UnicodeRegex>(*std::move(regex));
    return replacer;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(AsAbsl(context), " pattern must be {\"String\": ...} or {\"Regex\": ...}"));
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

}  // namespace kvserve::model
