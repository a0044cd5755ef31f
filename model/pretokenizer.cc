// tokenizer.json pre-tokenizers: ByteLevel, Split, Metaspace, Digits, Whitespace,
// WhitespaceSplit and Sequence.
#include "model/pretokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model/tokenizer_json_util.h"
#include "model/unicode_regex.h"
#include "model/unicode_utils.h"

namespace kvserve::model {
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

absl::StatusOr<SplitBehavior> ParseBehavior(const nlohmann::json& config) {
  const std::string behavior = config.value("behavior", "Isolated");
  if (behavior == "Removed") return SplitBehavior::kRemoved;
  if (behavior == "Isolated") return SplitBehavior::kIsolated;
  if (behavior == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (behavior == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (behavior == "Contiguous") return SplitBehavior::kContiguous;
  return absl::InvalidArgumentError(absl::StrCat("unsupported Split behavior '", behavior, "'"));
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> CreateSplit(const nlohmann::json& config) {
  auto behavior = ParseBehavior(config);
  if (!behavior.ok()) return behavior.status();
  const bool invert = config.value("invert", false);
  auto pattern = config.find("pattern");
  if (pattern == config.end() || !pattern->is_object()) {
    return absl::InvalidArgumentError("Split pre-tokenizer needs a 'pattern' object");
  }
  if (auto s = pattern->find("String"); s != pattern->end() && s->is_string()) {
    return std::make_unique<RegexSplitPreTokenizer>(nullptr, s->get<std::string>(), *behavior,
                                                    invert);
  }
  if (auto r = pattern->find("Regex"); r != pattern->end() && r->is_string()) {
    auto regex = UnicodeRegex::Create(r->get<std::string>());
    if (!regex.ok()) return regex.status();
    return std::make_unique<RegexSplitPreTokenizer>(*std::move(regex), "", *behavior, invert);
  }
  return absl::InvalidArgumentError("Split pattern must be {\"String\": ...} or {\"Regex\": ...}");
}

}  // namespace

absl::StatusOr<std::unique_ptr<PreTokenizer>> CreatePreTokenizer(const nlohmann::json& config) {
  if (!config.is_object()) return absl::InvalidArgumentError("pre_tokenizer must be an object");
  auto type = GetString(config, "type", "pre_tokenizer");
  if (!type.ok()) return type.status();
  if (*type == "Split") return CreateSplit(config);
  if (*type == "ByteLevel") {
    std::unique_ptr<UnicodeRegex> regex;
    if (config.value("use_regex", true)) {
      auto compiled = UnicodeRegex::Create(kGpt2SplitPattern);
      if (!compiled.ok()) return compiled.status();
      regex = *std::move(compiled);
    }
    return std::make_unique<ByteLevelPreTokenizer>(config.value("add_prefix_space", true),
                                                   std::move(regex));
  }
  if (*type == "Metaspace") {
    PrependScheme scheme = PrependScheme::kAlways;
    if (auto it = config.find("prepend_scheme"); it != config.end() && it->is_string()) {
      const std::string s = it->get<std::string>();
      if (s == "first") {
        scheme = PrependScheme::kFirst;
      } else if (s == "never") {
        scheme = PrependScheme::kNever;
      } else if (s != "always") {
        return absl::InvalidArgumentError(
            absl::StrCat("unsupported Metaspace prepend_scheme '", s, "'"));
      }
    } else if (!config.value("add_prefix_space", true)) {
      scheme = PrependScheme::kNever;
    }
    std::string replacement = config.value("replacement", std::string("\xE2\x96\x81"));
    if (replacement.empty()) return absl::InvalidArgumentError("Metaspace replacement is empty");
    return std::make_unique<MetaspacePreTokenizer>(std::move(replacement), scheme,
                                                   config.value("split", true));
  }
  if (*type == "Digits") {
    return std::make_unique<DigitsPreTokenizer>(config.value("individual_digits", false));
  }
  if (*type == "Whitespace" || *type == "WhitespaceSplit") {
    const bool words = *type == "Whitespace";
    auto regex = UnicodeRegex::Create(words ? R"(\w+|[^\w\s]+)" : R"(\S+)");
    if (!regex.ok()) return regex.status();
    return std::make_unique<RegexSplitPreTokenizer>(*std::move(regex), "", SplitBehavior::kRemoved,
                                                    true);
  }
  if (*type == "Sequence") {
    auto it = config.find("pretokenizers");
    if (it == config.end() || !it->is_array()) {
      return absl::InvalidArgumentError("Sequence pre-tokenizer needs a 'pretokenizers' array");
    }
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (const auto& step : *it) {
      auto pre = CreatePreTokenizer(step);
      if (!pre.ok()) return pre.status();
      steps.push_back(*std::move(pre));
    }
    return std::make_unique<SequencePreTokenizer>(std::move(steps));
  }
  return absl::InvalidArgumentError(absl::StrCat("unsupported pre_tokenizer type '", *type, "'"));
}

}  // namespace kvserve::model
