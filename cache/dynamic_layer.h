// DynamicLayer: a full-attention layer whose cache grows with every token.
#pragma once

#include "cache/cache_layer.h"
#include "cache/kv_buffer.h"

namespace kvserve::cache {

// Keeps every token. Update returns every stored token (kv_offset 0). Crop(n < 0) removes
// the last -n tokens (all of them when -n >= length); a positive n is the legacy absolute
// target length of the reference and shrinks only.
class DynamicLayer final : public CacheLayer {
 public:
  DynamicLayer() = default;

  absl::StatusOr<LayerView> Update(const at::Tensor& keys, const at::Tensor& values) override;
  int64_t SeqLength() const override { return buffer_.size(); }
  int64_t MaxLength() const override { return -1; }
  int64_t BatchSize() const override { return buffer_.batch_size(); }
  absl::Status Crop(int64_t n) override;
  absl::Status Reorder(const at::Tensor& beam_idx) override;
  absl::Status SelectIndices(const at::Tensor& indices) override;
  absl::Status RepeatInterleave(int64_t repeats) override;
  MemoryUsage Memory() const override { return {.device_bytes = buffer_.bytes()}; }
  std::unique_ptr<CacheLayer> Clone() const override;
  void Reset() override { buffer_.Reset(); }
  LayerType type() const override { return LayerType::kFullAttention; }
  bool ForEachTensor(const std::function<void(at::Tensor&)>& fn) override {
    buffer_.ForEachTensor(fn);
    return true;
  }

  // The stored tokens, [batch, kv_heads, SeqLength(), head_dim]: views into the layer's
  // storage (not its spare capacity), valid until the next mutating call; undefined tensors
  // before the first update. Readers must not write through them.
  at::Tensor keys() const;
  at::Tensor values() const;

 private:
  KvBuffer buffer_;
};

// Checks a batch index tensor against `batch_size`; shared by the layer classes.
absl::Status CheckBatchIndices(const at::Tensor& indices, int64_t batch_size, bool same_size);

}  // namespace kvserve::cache
