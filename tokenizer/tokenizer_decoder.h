// tokenizer.json decoders: ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, Sequence.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"

namespace kvserve::tokenizer {

// Turns token strings back into text. Immutable and thread-safe.
class TokenDecoder {
 public:
  virtual ~TokenDecoder() = default;
  // Rewrites the token strings in place (a decoder may fuse them); the decoded text is the
  // concatenation of the result.
  virtual void DecodeChain(std::vector<std::string>* tokens) const = 0;
};

// Builds the decoder described by tokenizer.json's "decoder" object, the value at `path`
// ("decoder"). `added_tokens` holds the contents of the added tokens, which the ByteLevel
// decoder passes through unmapped; it must outlive the decoder. InvalidArgument naming the
// JSON path for an unknown or unsupported type, a missing field or a field of the wrong type.
absl::StatusOr<std::unique_ptr<TokenDecoder>> CreateTokenDecoder(
    const nlohmann::json& config, std::string_view path,
    const absl::flat_hash_set<std::string>* added_tokens);

}  // namespace kvserve::tokenizer
