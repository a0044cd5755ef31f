// tokenizer.json pre-tokenizers: ByteLevel, Split, Metaspace, Digits, Whitespace,
// WhitespaceSplit and Sequence.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "absl/status/statusor.h"

namespace kvserve::tokenizer {

// Splits normalized text into the pieces the model encodes independently. Immutable and
// thread-safe.
class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces each element of `pieces` by its sub-pieces (in order; empty pieces are dropped).
  // `at_input_start` says whether pieces->front() begins at byte 0 of the encoded text (the
  // Metaspace "first" prepend scheme depends on it).
  virtual void PreTokenize(std::vector<std::string>* pieces, bool at_input_start) const = 0;
};

// Builds the pre-tokenizer described by tokenizer.json's "pre_tokenizer" object, the value at
// `path` ("pre_tokenizer"). InvalidArgument naming the JSON path for an unknown or
// unsupported type, a missing field or a field of the wrong type.
absl::StatusOr<std::unique_ptr<PreTokenizer>> CreatePreTokenizer(const nlohmann::json& config,
                                                                 std::string_view path);

// The GPT-2 pre-tokenization regex that ByteLevel uses with use_regex.
inline constexpr char kGpt2SplitPattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace kvserve::tokenizer
