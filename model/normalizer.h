// tokenizer.json normalizers: NFC/NFD/NFKC/NFKD, Replace, Prepend, Lowercase, Strip, Sequence.
#ifndef KVSERVE_MODEL_NORMALIZER_H_
#define KVSERVE_MODEL_NORMALIZER_H_

#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "absl/status/statusor.h"

namespace kvserve::model {

// Rewrites text before pre-tokenization. Implementations are immutable and thread-safe.
class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // Normalizes `text` (UTF-8) in place.
  virtual void Normalize(std::string* text) const = 0;
};

// Builds the normalizer described by tokenizer.json's "normalizer" object. InvalidArgument
// naming the type when it is unknown or unsupported, or naming the missing field.
absl::StatusOr<std::unique_ptr<Normalizer>> CreateNormalizer(const nlohmann::json& config);

}  // namespace kvserve::model

#endif  // KVSERVE_MODEL_NORMALIZER_H_
