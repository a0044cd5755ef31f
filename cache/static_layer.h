// StaticLayer: a full-attention layer preallocated to max_cache_len slots.
#pragma once

#include "cache/cache_layer.h"
#include "cache/static_buffers.h"

namespace kvserve::cache {

// Allocates zeroed [batch, kv_heads, max_cache_len, head_dim] buffers on the first update
// (keys and values may differ in head_dim, as in MLA) and writes each update's tokens at the
// next free slots. Update returns the whole buffer: columns [0, SeqLength()) hold tokens,
// the rest are zero slots that attention masks. Writing past max_cache_len is OutOfRange
// and leaves the layer unchanged (the reference raises an index error).
//
// Divergence from the reference, which has no crop or batch selection on static layers:
// Crop, SelectIndices and RepeatInterleave are supported, so that every strategy can roll
// back a draft and feed several sequences from one batch-1 snapshot.
class StaticLayer final : public CacheLayer {
 public:
  // `max_cache_len` >= 1.
  explicit StaticLayer(int64_t max_cache_len);

  absl::StatusOr<LayerView> Update(const at::Tensor& keys, const at::Tensor& values) override;
  int64_t SeqLength() const override { return length_; }
  int64_t MaxLength() const override { return max_cache_len_; }
  int64_t BatchSize() const override { return buffers_.batch_size(); }
  absl::Status Crop(int64_t n) override;
  absl::Status Reorder(const at::Tensor& beam_idx) override;
  absl::Status SelectIndices(const at::Tensor& indices) override;
  absl::Status RepeatInterleave(int64_t repeats) override;
  MemoryUsage Memory() const override;
  std::unique_ptr<CacheLayer> Clone() const override;
  void Reset() override;
  LayerType type() const override { return LayerType::kFullAttention; }
  bool ForEachTensor(const std::function<void(at::Tensor&)>& fn) override;

 private:
  int64_t max_cache_len_;
  int64_t length_ = 0;     // tokens written, in slots [0, length_)
  StaticBuffers buffers_;  // max_cache_len slots
};

}  // namespace kvserve::cache
