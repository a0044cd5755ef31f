// StaticSlidingWindowLayer: a sliding-window (or chunked) layer preallocated to its window.
#pragma once

#include "cache/cache_layer.h"
#include "cache/static_buffers.h"

namespace kvserve::cache {

// Holds E = min(window, max_cache_len) slots ([batch, kv_heads, E, head_dim]) and keeps the
// last E tokens, rolling once full; note that it keeps `window` tokens where the dynamic
// sliding layer keeps window-1 (reference §2.4). With c tokens seen and n new ones, Update
// returns:
//   - c + n <= E: the whole buffer (kv_offset 0, num_valid c+n, unused slots after);
//   - c < E < c + n: the c stored tokens plus all n new ones (kv_offset 0, c+n columns);
//   - c >= E, n == 1: the rolled buffer (kv_offset c-E+1, E columns);
//   - c >= E, n > 1: the last E-1 stored tokens plus the n new ones (kv_offset c-E+1).
// The mask applies the window; SeqLength is c, not the stored count.
//
// Divergence from the reference (which has no crop on static layers): Crop(n <= 0) works
// while no token has been dropped (c <= E) and is FailedPrecondition after, because the
// dropped states are gone (static layers do not record past states; the reference refuses
// assisted decoding with static caches for the same reason).
class StaticSlidingWindowLayer final : public CacheLayer {
 public:
  // `window` >= 2, `max_cache_len` >= 1.
  StaticSlidingWindowLayer(LayerType type, int64_t window, int64_t max_cache_len);

  absl::StatusOr<LayerView> Update(const at::Tensor& keys, const at::Tensor& values) override;
  int64_t SeqLength() const override { return length_; }
  int64_t MaxLength() const override { return capacity_; }
  int64_t BatchSize() const override { return buffers_.batch_size(); }
  absl::Status Crop(int64_t n) override;
  absl::Status CheckCrop(int64_t n) const override;
  absl::Status Reorder(const at::Tensor& beam_idx) override;
  absl::Status SelectIndices(const at::Tensor& indices) override;
  absl::Status RepeatInterleave(int64_t repeats) override;
  MemoryUsage Memory() const override;
  std::unique_ptr<CacheLayer> Clone() const override;
  void Reset() override;
  LayerType type() const override { return type_; }
  bool ForEachTensor(const std::function<void(at::Tensor&)>& fn) override;

  int64_t window() const { return window_; }

 private:
  LayerType type_;
  int64_t window_;
  int64_t capacity_;       // E = min(window, max_cache_len)
  int64_t length_ = 0;     // tokens ever seen (c)
  StaticBuffers buffers_;  // E slots: the last min(c, E) tokens
};

}  // namespace kvserve::cache
