// Attention of one sequence's queries against what its cache layer returned, with the mask
// of the layer's kind (full, sliding window, chunked) and grouped-query heads.
#pragma once

#include <ATen/ATen.h>

#include "cache/cache_layer.h"
#include "cache/layer_type.h"

namespace kvserve::model {

// queries: [n, heads, head_dim] at absolute positions q_start .. q_start + n - 1.
// kv: the layer view ([1, kv_heads, kv_len, head_dim] keys/values; see cache::LayerView).
// Query head h reads kv head h / (heads / kv_heads). Returns [n, heads * head_dim].
// A query position with no visible key (impossible for causal layers) yields zeros.
at::Tensor Attend(const at::Tensor& queries, const cache::LayerView& kv, int64_t q_start,
                  const cache::LayerSpec& layer, double scale);

// The visibility mask used by Attend: [n, kv_len] bool, true where query i may see column j.
at::Tensor VisibilityMask(int64_t n, int64_t q_start, const cache::LayerView& kv,
                          const cache::LayerSpec& layer, const c10::Device& device);

}  // namespace kvserve::model
