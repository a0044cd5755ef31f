// tokenizer.json pre-tokenizers: ByteLevel, Split, Metaspace, Digits, Whitespace,
// WhitespaceSplit and Sequence.
#include "tokenizer/pretokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tokenizer/tokenizer_json_util.h"
#include "tokenizer/unicode_regex.h"
#include "tokenizer/unicode_utils.h"

namespace kvserve::tokenizer {
namespace {

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

using Range = std::pair<size_t, size_t>;

// Turns the matched ranges of `text` into pieces according to `behavior` (Hugging Face's
// SplitDelimiterBehavior semantics; `invert` swaps which ranges count as delimiters).
void SplitByMatches(std::string_view text, const std::vector<Range>& matches,
                    SplitBehavior behavior, bool invert, std::vector<std::string>* out) {
  std::vector<std::pair<Range, bool>> parts;  // (range, is_delimiter)
  size_t pos = 0;
  for (const auto& m : matches) {
    if (m.first > pos) parts.push_back({{pos, m.first}, invert});
    parts.push_back({m, !invert});
    pos = m.second;
  }
  if (pos < text.size()) parts.push_back({{pos, text.size()}, invert});

  std::vector<Range> pieces;
  bool previous_delimiter = false;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const auto& [r, d] : parts) {
        if (!d) pieces.push_back(r);
      }
      break;
    case SplitBehavior::kIsolated:
      for (const auto& [r, d] : parts) pieces.push_back(r);
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const auto& [r, d] : parts) {
        if (d && !previous_delimiter && !pieces.empty()) {
          pieces.back().second = r.second;
        } else {
          pieces.push_back(r);
        }
        previous_delimiter = d;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
        if (it->second && !previous_delimiter && !pieces.empty()) {
          pieces.back().first = it->first.first;
        } else {
          pieces.push_back(it->first);
        }
        previous_delimiter = it->second;
      }
      std::reverse(pieces.begin(), pieces.end());
      break;
    case SplitBehavior::kContiguous:
      for (size_t i = 0; i < parts.size(); ++i) {
        if (i > 0 && parts[i].second == previous_delimiter) {
          pieces.back().second = parts[i].first.second;
        } else {
          pieces.push_back(parts[i].first);
        }
        previous_delimiter = parts[i].second;
      }
      break;
  }
  for (const auto& r : pieces) {
    if (r.second > r.first) out->emplace_back(text.substr(r.first, r.second - r.first));
  }
}

// Applies `split` to every piece.
template <typename F>
void ForEachPiece(std::vector<std::string>* pieces, F split) {
  std::vector<std::string> out;
  out.reserve(pieces->size() * 2);
  for (const auto& piece : *pieces) split(std::string_view(piece), &out);
  *pieces = std::move(out);
}

class RegexSplitPreTokenizer : public PreTokenizer {
 public:
  RegexSplitPreTokenizer(std::unique_ptr<UnicodeRegex> regex, std::string literal,
                         SplitBehavior behavior, bool invert)
      : regex_(std::move(regex)),
        literal_(std::move(literal)),
        behavior_(behavior),
        invert_(invert) {}

  void PreTokenize(std::vector<std::string>* pieces, bool) const override {
    std::vector<Range> matches;
    ForEachPiece(pieces, [&](std::string_view text, std::vector<std::string>* out) {
      matches.clear();
      if (regex_ != nullptr) {
        regex_->FindAll(text, &matches);
      } else if (!literal_.empty()) {
        for (size_t pos = text.find(literal_); pos != std::string_view::npos;
             pos = text.find(literal_, pos + literal_.size())) {
          matches.emplace_back(pos, pos + literal_.size());
        }
      }
      SplitByMatches(text, matches, behavior_, invert_, out);
    });
  }

 private:
  std::unique_ptr<UnicodeRegex> regex_;  // null for a literal pattern
  std::string literal_;
  SplitBehavior behavior_;
  bool invert_;
};

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::unique_ptr<UnicodeRegex> regex)
      : add_prefix_space_(add_prefix_space), regex_(std::move(regex)) {}

  void PreTokenize(std::vector<std::string>* pieces, bool) const override {
    const auto& table = GetByteLevelTables().byte_to_utf8;
    std::vector<Range> matches;
    ForEachPiece(pieces, [&](std::string_view text, std::vector<std::string>* out) {
      std::string prefixed;
      if (add_prefix_space_ && !text.empty() && text.front() != ' ') {
        prefixed = absl::StrCat(" ", AsAbsl(text));
        text = prefixed;
      }
      matches.clear();
      if (regex_ != nullptr) {
        regex_->FindAll(text, &matches);
      } else if (!text.empty()) {
        matches.emplace_back(0, text.size());
      }
      std::vector<std::string> split;
      SplitByMatches(text, matches, SplitBehavior::kIsolated, false, &split);
      for (const auto& s : split) {
        std::string mapped;
        mapped.reserve(s.size() * 2);
        for (unsigned char c : s) mapped.append(table[c]);
        out->push_back(std::move(mapped));
      }
    });
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<UnicodeRegex> regex_;  // null when use_regex is false
};

enum class PrependScheme { kAlways, kFirst, kNever };

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {}

  void PreTokenize(std::vector<std::string>* pieces, bool at_input_start) const override {
    std::vector<std::string> out;
    for (size_t i = 0; i < pieces->size(); ++i) {
      std::string_view text = (*pieces)[i];
      std::string replaced;
      const bool prepend = scheme_ == PrependScheme::kAlways ||
                           (scheme_ == PrependScheme::kFirst && at_input_start && i == 0);
      if (prepend && !text.empty() && !text.starts_with(replacement_) && text.front() != ' ') {
        replaced = replacement_;
      }
      for (char c : text) {
        if (c == ' ') {
          replaced.append(replacement_);
        } else {
          replaced.push_back(c);
        }
      }
      if (!split_) {
        if (!replaced.empty()) out.push_back(std::move(replaced));
        continue;
      }
      std::vector<Range> matches;
      for (size_t pos = replaced.find(replacement_); pos != std::string::npos;
           pos = replaced.find(replacement_, pos + replacement_.size())) {
        matches.emplace_back(pos, pos + replacement_.size());
      }
      SplitByMatches(replaced, matches, SplitBehavior::kMergedWithNext, false, &out);
    }
    *pieces = std::move(out);
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
};

class DigitsPreTokenizer : public PreTokenizer {
 public:
  explicit DigitsPreTokenizer(bool individual) : individual_(individual) {}
  void PreTokenize(std::vector<std::string>* pieces, bool) const override {
    std::vector<Range> matches;
    ForEachPiece(pieces, [&](std::string_view text, std::vector<std::string>* out) {
      matches.clear();
      size_t pos = 0;
      while (pos < text.size()) {
        const size_t begin = pos;
        const char32_t cp = DecodeUtf8(text, &pos);
        if (IsNumeric(cp)) matches.emplace_back(begin, pos);
      }
      SplitByMatches(text, matches,
                     individual_ ? SplitBehavior::kIsolated : SplitBehavior::kContiguous, false,
                     out);
    });
  }

 private:
  static bool IsNumeric(char32_t cp) {
    return (cp >= '0' && cp <= '9') || (cp >= 0x660 && cp <= 0x669) ||
           (cp >= 0xFF10 && cp <= 0xFF19);
  }
  bool individual_;
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}
  void PreTokenize(std::vector<std::string>* pieces, bool at_input_start) const override {
    for (const auto& step : steps_) step->PreTokenize(pieces, at_input_start);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

absl::StatusOr<SplitBehavior> ParseBehavior(const nlohmann::json& config, std::string_view path) {
  auto behavior = GetOptionalString(config, "behavior", path, "Isolated");
  if (!behavior.ok()) return behavior.status();
  if (*behavior == "Removed") return SplitBehavior::kRemoved;
  if (*behavior == "Isolated") return SplitBehavior::kIsolated;
  if (*behavior == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (*behavior == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (*behavior == "Contiguous") return SplitBehavior::kContiguous;
  return absl::InvalidArgumentError(absl::StrCat(JsonMemberPath(path, "behavior"),
                                                 ": unsupported Split behavior '", *behavior, "'"));
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> CreateSplit(const nlohmann::json& config,
                                                          std::string_view path) {
  auto behavior = ParseBehavior(config, path);
  if (!behavior.ok()) return behavior.status();
  auto invert = GetBool(config, "invert", path, false);
  if (!invert.ok()) return invert.status();
  auto pattern = GetObject(config, "pattern", path);
  if (!pattern.ok()) return pattern.status();
  const std::string pattern_path = JsonMemberPath(path, "pattern");
  if ((*pattern)->contains("String")) {
    auto literal = GetString(**pattern, "String", pattern_path);
    if (!literal.ok()) return literal.status();
    return std::make_unique<RegexSplitPreTokenizer>(nullptr, *std::move(literal), *behavior,
                                                    *invert);
  }
  if ((*pattern)->contains("Regex")) {
    auto source = GetString(**pattern, "Regex", pattern_path);
    if (!source.ok()) return source.status();
    auto regex = UnicodeRegex::Create(*source);
    if (!regex.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(JsonMemberPath(pattern_path, "Regex"), ": ", regex.status().message()));
    }
    return std::make_unique<RegexSplitPreTokenizer>(*std::move(regex), "", *behavior, *invert);
  }
  return absl::InvalidArgumentError(
      absl::StrCat(pattern_path, ": expected {\"String\": ...} or {\"Regex\": ...}"));
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> CreateMetaspace(const nlohmann::json& config,
                                                              std::string_view path) {
  PrependScheme scheme = PrependScheme::kAlways;
  if (config.contains("prepend_scheme") && !config["prepend_scheme"].is_null()) {
    auto name = GetString(config, "prepend_scheme", path);
    if (!name.ok()) return name.status();
    if (*name == "first") {
      scheme = PrependScheme::kFirst;
    } else if (*name == "never") {
      scheme = PrependScheme::kNever;
    } else if (*name != "always") {
      return absl::InvalidArgumentError(absl::StrCat(JsonMemberPath(path, "prepend_scheme"),
                                                     ": unsupported Metaspace prepend_scheme '",
                                                     *name, "'"));
    }
  } else {
    auto add_prefix_space = GetBool(config, "add_prefix_space", path, true);
    if (!add_prefix_space.ok()) return add_prefix_space.status();
    if (!*add_prefix_space) scheme = PrependScheme::kNever;
  }
  auto replacement = GetOptionalString(config, "replacement", path, "\xE2\x96\x81");
  if (!replacement.ok()) return replacement.status();
  if (replacement->empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(JsonMemberPath(path, "replacement"), ": must not be empty"));
  }
  auto split = GetBool(config, "split", path, true);
  if (!split.ok()) return split.status();
  return std::make_unique<MetaspacePreTokenizer>(*std::move(replacement), scheme, *split);
}

}  // namespace

absl::StatusOr<std::unique_ptr<PreTokenizer>> CreatePreTokenizer(const nlohmann::json& config,
                                                                 std::string_view path) {
  if (absl::Status s = ExpectJsonObject(config, path); !s.ok()) return s;
  auto type = GetString(config, "type", path);
  if (!type.ok()) return type.status();
  if (*type == "Split") return CreateSplit(config, path);
  if (*type == "ByteLevel") {
    auto use_regex = GetBool(config, "use_regex", path, true);
    if (!use_regex.ok()) return use_regex.status();
    auto add_prefix_space = GetBool(config, "add_prefix_space", path, true);
    if (!add_prefix_space.ok()) return add_prefix_space.status();
    std::unique_ptr<UnicodeRegex> regex;
    if (*use_regex) {
      auto compiled = UnicodeRegex::Create(kGpt2SplitPattern);
      if (!compiled.ok()) return compiled.status();
      regex = *std::move(compiled);
    }
    return std::make_unique<ByteLevelPreTokenizer>(*add_prefix_space, std::move(regex));
  }
  if (*type == "Metaspace") return CreateMetaspace(config, path);
  if (*type == "Digits") {
    auto individual = GetBool(config, "individual_digits", path, false);
    if (!individual.ok()) return individual.status();
    return std::make_unique<DigitsPreTokenizer>(*individual);
  }
  if (*type == "Whitespace" || *type == "WhitespaceSplit") {
    const bool words = *type == "Whitespace";
    auto regex = UnicodeRegex::Create(words ? R"(\w+|[^\w\s]+)" : R"(\S+)");
    if (!regex.ok()) return regex.status();
    return std::make_unique<RegexSplitPreTokenizer>(*std::move(regex), "", SplitBehavior::kRemoved,
                                                    true);
  }
  if (*type == "Sequence") {
    auto listed = GetArray(config, "pretokenizers", path);
    if (!listed.ok()) return listed.status();
    const std::string steps_path = JsonMemberPath(path, "pretokenizers");
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (size_t i = 0; i < (*listed)->size(); ++i) {
      auto pre = CreatePreTokenizer((**listed)[i], JsonElementPath(steps_path, i));
      if (!pre.ok()) return pre.status();
      steps.push_back(*std::move(pre));
    }
    return std::make_unique<SequencePreTokenizer>(std::move(steps));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(JsonMemberPath(path, "type"), ": unsupported pre_tokenizer type '", *type, "'"));
}

}  // namespace kvserve::tokenizer
