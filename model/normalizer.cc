// tokenizer.json normalizers: NFC/NFD/NFKC/NFKD, Replace, Prepend, Lowercase, Strip, Sequence.
#include "model/normalizer.h"

#include <nlohmann/json.hpp>

#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model/tokenizer_json_util.h"
#include "model/unicode_regex.h"
#include "model/unicode_utils.h"

namespace kvserve::model {
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

absl::StatusOr<std::unique_ptr<Normalizer>> CreateNormalizer(const nlohmann::json& config) {
  if (!config.is_object()) return absl::InvalidArgumentError("normalizer must be an object");
  auto type = GetString(config, "type", "normalizer");
  if (!type.ok()) return type.status();
  if (*type == "NFC") return std::make_unique<UnicodeNormalizer>(NormalizationForm::kNfc);
  if (*type == "NFD") return std::make_unique<UnicodeNormalizer>(NormalizationForm::kNfd);
  if (*type == "NFKC") return std::make_unique<UnicodeNormalizer>(NormalizationForm::kNfkc);
  if (*type == "NFKD") return std::make_unique<UnicodeNormalizer>(NormalizationForm::kNfkd);
  if (*type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (*type == "Prepend") {
    auto prefix = GetString(config, "prepend", "Prepend normalizer");
    if (!prefix.ok()) return prefix.status();
    return std::make_unique<PrependNormalizer>(*std::move(prefix));
  }
  if (*type == "Strip") {
    return std::make_unique<StripNormalizer>(config.value("strip_left", true),
                                             config.value("strip_right", true));
  }
  if (*type == "Replace") {
    auto replacer = StringReplacer::FromJson(config, "Replace normalizer");
    if (!replacer.ok()) return replacer.status();
    return std::make_unique<ReplaceNormalizer>(*std::move(replacer));
  }
  if (*type == "Sequence") {
    auto it = config.find("normalizers");
    if (it == config.end() || !it->is_array()) {
      return absl::InvalidArgumentError("Sequence normalizer needs a 'normalizers' array");
    }
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (const auto& step : *it) {
      auto normalizer = CreateNormalizer(step);
      if (!normalizer.ok()) return normalizer.status();
      steps.push_back(*std::move(normalizer));
    }
    return std::make_unique<SequenceNormalizer>(std::move(steps));
  }
  return absl::InvalidArgumentError(absl::StrCat("unsupported normalizer type '", *type, "'"));
}

}  // namespace kvserve::model
