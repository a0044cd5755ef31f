// TokenBytesOf: decodings after an anchor token.
#include "constraint/vocabulary.h"

#include <cstdint>

#include "tokenizer/tokenizer.h"

namespace kvserve::constraint {

absl::StatusOr<std::vector<std::string>> TokenBytesOf(const tokenizer::Tokenizer& tokenizer) {
  const int32_t vocab = static_cast<int32_t>(tokenizer.vocab_size());
  // The anchor: a token decoding to one ASCII letter on its own and after itself.
  std::optional<int32_t> anchor;
  std::string anchor_text;
  for (const char* candidate : {"a",
                                "\xE2\x96\x81"
                                "a",
                                "x",
                                "\xC4\xA0"
                                "a"}) {
    std::optional<int32_t> id = tokenizer.TokenToId(candidate);
    if (!id || tokenizer.IsSpecialToken(*id)) continue;
    const std::string text = tokenizer.DecodeWithoutCleanup({*id}, false);
    if (text.size() == 1 || (text.size() == 2 && text[0] == ' ')) {
      anchor = id;
      anchor_text = text;
      break;
    }
  }
  if (!anchor) {
    return absl::FailedPreconditionError("the vocabulary has no plain one-letter token");
  }
  std::vector<std::string> out(vocab);
  for (int32_t id = 0; id < vocab; ++id) {
    if (tokenizer.IsSpecialToken(id)) continue;
    const int32_t pair[] = {*anchor, id};
    const std::string text = tokenizer.DecodeWithoutCleanup(pair, false);
    if (text.compare(0, anchor_text.size(), anchor_text) != 0) continue;
    out[id] = text.substr(anchor_text.size());
  }
  return out;
}

}  // namespace kvserve::constraint
