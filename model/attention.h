// Attention of one sequence's queries against what its cache layer returned, with the mask
// of the layer's kind (full, sliding window, chunked) and grouped-query heads.
#pragma once

#include <ATen/ATen.h>

#include <array>
#include <vector>

#include "cache/cache_layer.h"
#include "cache/layer_type.h"

namespace kvserve::model {

// Visibility masks already built during one forward, so that layers of the same kind seeing
// the same cache window share one mask instead of rebuilding it per layer.
class MaskCache {
 public:
  // The mask VisibilityMask would build for these arguments, built at most once.
  const at::Tensor& Get(int64_t n, int64_t q_start, const cache::LayerView& kv,
                        const cache::LayerSpec& layer, const c10::Device& device);
  // The same mask as an additive float32 bias (0 where visible, -inf elsewhere), repeated
  // for `group` query heads: [group * n, kv_len], ready to be added to the scores.
  const at::Tensor& Bias(int64_t n, int64_t q_start, const cache::LayerView& kv,
                         const cache::LayerSpec& layer, const c10::Device& device, int64_t group);

 private:
  // The entry built for `key`, or nullptr.
  const at::Tensor* Find(const std::array<int64_t, 8>& key) const;

  struct Entry {
    std::array<int64_t, 8> key;  // the mask's arguments, and the group (0 for a bool mask)
    at::Tensor mask;             // [n, kv_len] bool, or the [group * n, kv_len] bias
  };
  std::vector<Entry> entries_;
};

// queries: [n, heads, head_dim] at absolute positions q_start .. q_start + n - 1.
// kv: the layer view ([1, kv_heads, kv_len, head_dim] keys/values; see cache::LayerView).
// Query head h reads kv head h / (heads / kv_heads). Returns [n, heads * head_dim].
// A query position with no visible key (impossible for causal layers) yields zeros.
// `masks` (optional) shares masks between the layers of one forward. softcap > 0 caps every
// scaled score s to softcap * tanh(s / softcap) before the mask applies (Gemma 2).
at::Tensor Attend(const at::Tensor& queries, const cache::LayerView& kv, int64_t q_start,
                  const cache::LayerSpec& layer, double scale, MaskCache* masks = nullptr,
                  double softcap = 0);

// The visibility mask used by Attend: [n, kv_len] bool, true where query i may see column j.
at::Tensor VisibilityMask(int64_t n, int64_t q_start, const cache::LayerView& kv,
                          const cache::LayerSpec& layer, const c10::Device& device);

}  // namespace kvserve::model
