// tokenizer.json normalizers: NFC/NFD/NFKC/NFKD, Replace, Prepend, Lowercase, Strip, Sequence.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "absl/status/statusor.h"

namespace kvserve::tokenizer {

// Rewrites text before pre-tokenization. Implementations are immutable and thread-safe.
class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // Normalizes `text` (UTF-8) in place.
  virtual void Normalize(std::string* text) const = 0;
};

// Builds the normalizer described by tokenizer.json's "normalizer" object, the value at
// `path` ("normalizer"). InvalidArgument naming the JSON path ("normalizer.normalizers[1].type:
// ...") for an unknown or unsupported type, a missing field or a field of the wrong type.
absl::StatusOr<std::unique_ptr<Normalizer>> CreateNormalizer(const nlohmann::json& config,
                                                             std::string_view path);

}  // namespace kvserve::tokenizer
