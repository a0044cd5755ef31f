// QuantizedLayer: KIVI-style cache layer, old tokens quantized, recent ones full precision.
#pragma once

#include <memory>

#include "cache/cache_layer.h"
#include "cache/kv_buffer.h"
#include "cache/quantized_tensor.h"
#include "cache/quantizer.h"

namespace kvserve::cache {

// Two stores: quantized keys/values (packed, see QuantizedTensor) and a full-precision
// residual of the most recent tokens. Follows the reference (§2.5) exactly:
//   - the first update quantizes every incoming token, leaves the residual empty and returns
//     the inputs unchanged (prefill attention is exact);
//   - later updates return dequant(quantized) + residual + new tokens; when the residual has
//     been appended to since the last flush and residual_len + 1 >= residual_length, that
//     whole returned tensor is re-quantized and the residual emptied, otherwise the new
//     tokens are appended to the residual (a multi-token update appends without a size
//     check). One token per step therefore flushes every max(residual_length, 2) steps.
//   - an update with zero new tokens is a pure read (no flush).
// Deliberate divergence: the reference's crop, reorder, batch selection and reset touch only
// the residual (so beam search with a quantized cache is silently wrong there, and crop
// leaves the length unchanged); here they act on both stores, and SeqLength follows crops.
class QuantizedLayer final : public CacheLayer {
 public:
  // `residual_length` >= 0; the quantizers are shared, stateless backends.
  QuantizedLayer(std::shared_ptr<const Quantizer> key_quantizer,
                 std::shared_ptr<const Quantizer> value_quantizer, int64_t residual_length);

  absl::StatusOr<LayerView> Update(const at::Tensor& keys, const at::Tensor& values) override;
  int64_t SeqLength() const override { return cumulative_length_; }
  int64_t MaxLength() const override { return -1; }
  int64_t BatchSize() const override { return quantized_keys_.batch_size(); }
  absl::Status Crop(int64_t n) override;
  absl::Status Reorder(const at::Tensor& beam_idx) override;
  absl::Status SelectIndices(const at::Tensor& indices) override;
  absl::Status RepeatInterleave(int64_t repeats) override;
  MemoryUsage Memory() const override;
  std::unique_ptr<CacheLayer> Clone() const override;
  void Reset() override;
  LayerType type() const override { return LayerType::kFullAttention; }
  bool ContentsDependOnUpdateSplit() const override { return true; }
  bool ForEachTensor(const std::function<void(at::Tensor&)>& fn) override;
  // A shallow copy: requantizing replaces the stores and appends write past the saved end.
  std::unique_ptr<CacheLayer> RollbackPoint() const override {
    return std::make_unique<QuantizedLayer>(*this);
  }
  void RestoreRollbackPoint(std::unique_ptr<CacheLayer> point) override {
    *this = static_cast<const QuantizedLayer&>(*point);
  }

  // Tokens in each store (quantized + residual == SeqLength()).
  int64_t num_quantized_tokens() const { return quantized_keys_.seq_len(); }
  int64_t num_residual_tokens() const { return residual_.size(); }
  const QuantizedTensor& quantized_keys() const { return quantized_keys_; }
  const QuantizedTensor& quantized_values() const { return quantized_values_; }

 private:
  std::shared_ptr<const Quantizer> key_quantizer_;
  std::shared_ptr<const Quantizer> value_quantizer_;
  int64_t residual_length_;
  bool initialized_ = false;
  // The reference's residual is a 1-D empty tensor until its first append after a flush, and
  // only a 4-D residual is checked for flushing; this flag is that distinction.
  bool residual_appended_ = false;
  int64_t cumulative_length_ = 0;
  at::ScalarType dtype_ = at::kFloat;  // of the updates, fixed by the first
  int64_t kv_heads_ = 0;               // fixed by the first update
  int64_t head_dim_ = 0;               // fixed by the first update
  QuantizedTensor quantized_keys_;     // [batch, kv_heads, num_quantized_tokens, head_dim]
  QuantizedTensor quantized_values_;   // as quantized_keys_
  KvBuffer residual_;                  // [batch, kv_heads, num_residual_tokens, head_dim]
};

}  // namespace kvserve::cache
