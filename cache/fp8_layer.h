// Fp8Layer: a growing full-attention layer stored as float8 e4m3 with one scale per tensor.
#pragma once

#include "cache/cache_layer.h"
#include "cache/kv_buffer.h"

namespace kvserve::cache {

// The fp8 backend of the quantized cache (the reference's planned backend, PR #48677):
// keys and values each get one scale, amax / 448 of the first update, then fixed; every
// token is appended straight into the fp8 store (no residual, no re-quantization; values
// beyond the calibrated range saturate). Update returns the dequantized stored tokens
// followed by the new tokens exactly as given (like the quanto/hqq layers, attention over
// the tokens of the current forward is exact), all in the input dtype.
class Fp8Layer final : public CacheLayer {
 public:
  Fp8Layer() = default;

  absl::StatusOr<LayerView> Update(const at::Tensor& keys, const at::Tensor& values) override;
  int64_t SeqLength() const override { return store_.size(); }
  int64_t MaxLength() const override { return -1; }
  int64_t BatchSize() const override { return store_.batch_size(); }
  absl::Status Crop(int64_t n) override;
  absl::Status Reorder(const at::Tensor& beam_idx) override;
  absl::Status SelectIndices(const at::Tensor& indices) override;
  absl::Status RepeatInterleave(int64_t repeats) override;
  MemoryUsage Memory() const override { return {.device_bytes = store_.bytes()}; }
  std::unique_ptr<CacheLayer> Clone() const override;
  void Reset() override;
  LayerType type() const override { return LayerType::kFullAttention; }
  // The first update calibrates the scales on every token it gets.
  bool ContentsDependOnUpdateSplit() const override { return true; }
  bool ForEachTensor(const std::function<void(at::Tensor&)>& fn) override {
    store_.ForEachTensor(fn);
    return true;
  }

  // The calibrated scales (0 before the first update).
  double key_scale() const { return key_scale_; }
  double value_scale() const { return value_scale_; }

 private:
  KvBuffer store_;  // fp8 storage (see ToFp8Storage) [batch, kv_heads, capacity, head_dim]
  double key_scale_ = 0;
  double value_scale_ = 0;
  at::ScalarType dtype_ = at::kFloat;  // dtype of the updates
};

}  // namespace kvserve::cache
