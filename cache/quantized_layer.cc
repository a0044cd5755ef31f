// The KIVI-style quantized cache layer (see quantized_layer.h).
#include "cache/quantized_layer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "cache/dynamic_layer.h"

namespace kvserve::cache {

QuantizedLayer::QuantizedLayer(std::shared_ptr<const Quantizer> key_quantizer,
                               std::shared_ptr<const Quantizer> value_quantizer,
                               int64_t residual_length)
    : key_quantizer_(std::move(key_quantizer)),
      value_quantizer_(std::move(value_quantizer)),
      residual_length_(residual_length) {}

absl::StatusOr<LayerView> QuantizedLayer::Update(const at::Tensor& keys, const at::Tensor& values) {
  // Shape, dtype and device checks against what is stored (the residual's own checks).
  KvBuffer probe;
  if (absl::Status s = probe.CheckAppend(keys, values); !s.ok()) return s;
  if (!at::isFloatingType(keys.scalar_type())) {
    return absl::InvalidArgumentError("quantized cache update needs floating-point keys");
  }
  if (initialized_) {
    if (keys.scalar_type() != dtype_ || keys.size(0) != BatchSize() || keys.size(1) != kv_heads_ ||
        keys.size(3) != head_dim_) {
      return absl::InvalidArgumentError(
          absl::StrCat("cache update: dtype or shape differs from the cache's (batch ", BatchSize(),
                       ", kv_heads ", kv_heads_, ", head_dim ", head_dim_, ")"));
    }
    if (residual_.defined()) {
      if (absl::Status s = residual_.CheckAppend(keys, values); !s.ok()) return s;
    }
  }
  const int64_t n = keys.size(2);
  if (!initialized_) {
    absl::StatusOr<QuantizedTensor> qk = key_quantizer_->Quantize(keys);
    if (!qk.ok()) return qk.status();
    absl::StatusOr<QuantizedTensor> qv = value_quantizer_->Quantize(values);
    if (!qv.ok()) return qv.status();
    quantized_keys_ = std::move(*qk);
    quantized_values_ = std::move(*qv);
    initialized_ = true;
    dtype_ = keys.scalar_type();
    kv_heads_ = keys.size(1);
    head_dim_ = keys.size(3);
    cumulative_length_ = n;
    return LayerView{keys, values, 0, n};
  }
  std::vector<at::Tensor> key_parts = {quantized_keys_.Dequantize()};
  std::vector<at::Tensor> value_parts = {quantized_values_.Dequantize()};
  if (residual_.size() > 0) {
    key_parts.push_back(residual_.keys());
    value_parts.push_back(residual_.values());
  }
  if (n == 0) {
    at::Tensor k = at::cat(key_parts, 2), v = at::cat(value_parts, 2);
    return LayerView{k, v, 0, k.size(2)};
  }
  key_parts.push_back(keys);
  value_parts.push_back(values);
  at::Tensor all_keys = at::cat(key_parts, 2);
  at::Tensor all_values = at::cat(value_parts, 2);
  if (residual_appended_ && residual_.size() + 1 >= residual_length_) {
    absl::StatusOr<QuantizedTensor> qk = key_quantizer_->Quantize(all_keys);
    if (!qk.ok()) return qk.status();
    absl::StatusOr<QuantizedTensor> qv = value_quantizer_->Quantize(all_values);
    if (!qv.ok()) return qv.status();
    quantized_keys_ = std::move(*qk);
    quantized_values_ = std::move(*qv);
    residual_.Reset();
    residual_appended_ = false;
  } else {
    residual_.Append(keys, values);
    residual_appended_ = true;
  }
  cumulative_length_ += n;
  return LayerView{all_keys, all_values, 0, all_keys.size(2)};
}

absl::Status QuantizedLayer::Crop(int64_t n) {
  const int64_t quantized = num_quantized_tokens();
  const int64_t total = quantized + num_residual_tokens();
  int64_t target = total;
  if (n < 0) {
    target = std::max<int64_t>(total + n, 0);
  } else if (n > 0 && n < total) {
    target = n;  // legacy absolute target length, as DynamicLayer
  }
  if (target == total) return absl::OkStatus();
  // Both stores (the reference crops only the residual).
  if (target >= quantized) {
    residual_.Truncate(target - quantized);
  } else {
    residual_.Truncate(0);
    quantized_keys_.Truncate(target);
    quantized_values_.Truncate(target);
  }
  cumulative_length_ = target;
  return absl::OkStatus();
}

absl::Status QuantizedLayer::Reorder(const at::Tensor& beam_idx) {
  if (!initialized_) return absl::OkStatus();
  if (absl::Status s = CheckBatchIndices(beam_idx, BatchSize(), true); !s.ok()) return s;
  quantized_keys_.SelectBatch(beam_idx);
  quantized_values_.SelectBatch(beam_idx);
  residual_.SelectBatch(beam_idx);
  return absl::OkStatus();
}

absl::Status QuantizedLayer::SelectIndices(const at::Tensor& indices) {
  if (!initialized_) return absl::OkStatus();
  if (absl::Status s = CheckBatchIndices(indices, BatchSize(), false); !s.ok()) return s;
  quantized_keys_.SelectBatch(indices);
  quantized_values_.SelectBatch(indices);
  residual_.SelectBatch(indices);
  return absl::OkStatus();
}

absl::Status QuantizedLayer::RepeatInterleave(int64_t repeats) {
  if (repeats < 1) return absl::InvalidArgumentError("repeats must be >= 1");
  quantized_keys_.RepeatInterleaveBatch(repeats);
  quantized_values_.RepeatInterleaveBatch(repeats);
  residual_.RepeatInterleaveBatch(repeats);
  return absl::OkStatus();
}

MemoryUsage QuantizedLayer::Memory() const {
  return {.device_bytes = quantized_keys_.bytes() + quantized_values_.bytes() + residual_.bytes()};
}

std::unique_ptr<CacheLayer> QuantizedLayer::Clone() const {
  auto copy = std::make_unique<QuantizedLayer>(key_quantizer_, value_quantizer_, residual_length_);
  copy->initialized_ = initialized_;
  copy->residual_appended_ = residual_appended_;
  copy->cumulative_length_ = cumulative_length_;
  copy->dtype_ = dtype_;
  copy->kv_heads_ = kv_heads_;
  copy->head_dim_ = head_dim_;
  copy->quantized_keys_ = quantized_keys_.Clone();
  copy->quantized_values_ = quantized_values_.Clone();
  copy->residual_ = residual_.CloneCompact();
  return copy;
}

void QuantizedLayer::Reset() {
  quantized_keys_ = QuantizedTensor();
  quantized_values_ = QuantizedTensor();
  residual_.Reset();
  initialized_ = false;
  residual_appended_ = false;
  cumulative_length_ = 0;
}

bool QuantizedLayer::ForEachTensor(const std::function<void(at::Tensor&)>& fn) {
  quantized_keys_.ForEachTensor(fn);
  quantized_values_.ForEachTensor(fn);
  residual_.ForEachTensor(fn);
  return true;
}

}  // namespace kvserve::cache
