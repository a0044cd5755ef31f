// CrossAttentionState: what the decoder of an encoder-decoder request reads besides its own
// self-attention K/V (the encoder's output and each decoder layer's cross-attention K/V).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace kvserve::cache {

// Computed once per request from its encoder input (when its first decoder step runs) and
// immutable afterwards, so that every row of the request (beams, samples) and every clone of
// its cache share it: the rows of one request have one encoder input, so reordering rows
// leaves it as it is.
struct CrossAttentionState {
  std::vector<int32_t> encoder_ids;  // the encoder input it was computed from
  at::Tensor encoder_output;         // [1, encoder_len, d_model]
  std::vector<at::Tensor> keys;      // per decoder layer: [1, heads, encoder_len, head_dim]
  std::vector<at::Tensor> values;    // per decoder layer: [1, heads, encoder_len, head_dim]

  int64_t bytes() const {
    int64_t total = encoder_output.defined() ? encoder_output.nbytes() : 0;
    for (const at::Tensor& t : keys) total += t.nbytes();
    for (const at::Tensor& t : values) total += t.nbytes();
    return total;
  }
};

}  // namespace kvserve::cache
