// tokenizer.json normalizers: NFC/NFD/NFKC/NFKD, Replace, Prepend, Lowercase, Strip, Sequence.
#include "tokenizer/normalizer.h"

#include <nlohmann/json.hpp>

#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tokenizer/tokenizer_json_util.h"
#include "tokenizer/unicode_regex.h"
#include "tokenizer/unicode_utils.h"

namespace kvserve::tokenizer {
namespace {

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(NormalizationForm form) : form_(form) {}
  void Normalize(std::string* text) const override { *text = NormalizeUnicode(*text, form_); }

 private:
  NormalizationForm form_;
};

class LowercaseNormalizer : public Normalizer {
 public:
  void Normalize(std::string* text) const override { *text = LowercaseUnicode(*text); }
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  void Normalize(std::string* text) const override {
    if (!text->empty()) text->insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void Normalize(std::string* text) const override {
    *text = StripWhitespace(*text, left_, right_);
  }

 private:
  bool left_, right_;
};

class ReplaceNormalizer : public Normalizer {
 public:
  explicit ReplaceNormalizer(StringReplacer replacer) : replacer_(std::move(replacer)) {}
  void Normalize(std::string* text) const override { *text = replacer_.Apply(*text); }

 private:
  StringReplacer replacer_;
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps)
      : steps_(std::move(steps)) {}
  void Normalize(std::string* text) const override {
    for (const auto& step : steps_) step->Normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Normalizer>> CreateNormalizer(const nlohmann::json& config,
                                                             std::string_view path) {
  if (absl::Status s = ExpectJsonObject(config, path); !s.ok()) return s;
  auto type = GetString(config, "type", path);
  if (!type.ok()) return type.status();
  if (*type == "NFC") return std::make_unique<UnicodeNormalizer>(NormalizationForm::kNfc);
  if (*type == "NFD") return std::make_unique<UnicodeNormalizer>(NormalizationForm::kNfd);
  if (*type == "NFKC") return std::make_unique<UnicodeNormalizer>(NormalizationForm::kNfkc);
  if (*type == "NFKD") return std::make_unique<UnicodeNormalizer>(NormalizationForm::kNfkd);
  if (*type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (*type == "Prepend") {
    auto prefix = GetString(config, "prepend", path);
    if (!prefix.ok()) return prefix.status();
    return std::make_unique<PrependNormalizer>(*std::move(prefix));
  }
  if (*type == "Strip") {
    auto left = GetBool(config, "strip_left", path, true);
    if (!left.ok()) return left.status();
    auto right = GetBool(config, "strip_right", path, true);
    if (!right.ok()) return right.status();
    return std::make_unique<StripNormalizer>(*left, *right);
  }
  if (*type == "Replace") {
    auto replacer = StringReplacer::FromJson(config, path);
    if (!replacer.ok()) return replacer.status();
    return std::make_unique<ReplaceNormalizer>(*std::move(replacer));
  }
  if (*type == "Sequence") {
    auto listed = GetArray(config, "normalizers", path);
    if (!listed.ok()) return listed.status();
    const std::string steps_path = JsonMemberPath(path, "normalizers");
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (size_t i = 0; i < (*listed)->size(); ++i) {
      auto normalizer = CreateNormalizer((**listed)[i], JsonElementPath(steps_path, i));
      if (!normalizer.ok()) return normalizer.status();
      steps.push_back(*std::move(normalizer));
    }
    return std::make_unique<SequenceNormalizer>(std::move(steps));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(JsonMemberPath(path, "type"), ": unsupported normalizer type '", *type, "'"));
}

}  // namespace kvserve::tokenizer
