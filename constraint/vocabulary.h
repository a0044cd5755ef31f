// TokenBytesOf: each token's bytes as it adds them to an output (a byte-level BPE token's raw
// bytes, a SentencePiece token's "▁" as a space and <0xNN> as its byte), for the mask's trie.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kvserve::tokenizer {
class Tokenizer;
}  // namespace kvserve::tokenizer

namespace kvserve::constraint {

// Per token id, the bytes it appends after other text: the tokenizer's decoding of (anchor,
// id) less the decoding of the anchor alone, so that decoders which strip a leading space at
// the start of a text do not strip it here. Special tokens get an empty string (a mask never
// allows them; EOS is the mask's own rule). FailedPrecondition when no plain one-letter token
// can serve as the anchor.
absl::StatusOr<std::vector<std::string>> TokenBytesOf(const tokenizer::Tokenizer& tokenizer);

}  // namespace kvserve::constraint
