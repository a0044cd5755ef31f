// The float8 cache layer (see fp8_layer.h).
#include "cache/fp8_layer.h"

#include <algorithm>

#include "cache/dynamic_layer.h"
#include "cache/fp8_codec.h"

namespace kvserve::cache {
namespace {

double Calibrate(const at::Tensor& x) {
  const double amax = x.numel() ? x.abs().max().item<double>() : 0.0;
  // An all-zero first update still needs a usable scale.
  return amax > 0 ? amax / kE4m3Max : 1.0;
}

}  // namespace

absl::StatusOr<LayerView> Fp8Layer::Update(const at::Tensor& keys, const at::Tensor& values) {
  if (!keys.defined() || !values.defined() || keys.dim() != 4 || values.dim() != 4) {
    return absl::InvalidArgumentError(
        "cache update needs 4-D keys and values [batch, kv_heads, tokens, head_dim]");
  }
  if (!at::isFloatingType(keys.scalar_type()) || !at::isFloatingType(values.scalar_type())) {
    return absl::InvalidArgumentError("fp8 cache update needs floating-point keys and values");
  }
  if (store_.defined() && (keys.scalar_type() != dtype_ || values.scalar_type() != dtype_)) {
    return absl::InvalidArgumentError("cache update: dtype differs from the cache's");
  }
  // The scales are calibrated on the first update that carries tokens, then fixed.
  const bool calibrate = key_scale_ == 0 && keys.size(2) > 0;
  const double key_scale = calibrate ? Calibrate(keys) : (key_scale_ > 0 ? key_scale_ : 1.0);
  const double value_scale =
      calibrate ? Calibrate(values) : (value_scale_ > 0 ? value_scale_ : 1.0);
  const at::Tensor fp8_keys = ToFp8Storage(keys / key_scale);
  const at::Tensor fp8_values = ToFp8Storage(values / value_scale);
  if (absl::Status s = store_.CheckAppend(fp8_keys, fp8_values); !s.ok()) return s;
  at::Tensor past_keys, past_values;
  if (store_.size() > 0) {
    past_keys = (FromFp8Storage(store_.keys()) * key_scale_).to(dtype_);
    past_values = (FromFp8Storage(store_.values()) * value_scale_).to(dtype_);
  }
  if (calibrate) {
    key_scale_ = key_scale;
    value_scale_ = value_scale;
  }
  dtype_ = keys.scalar_type();
  store_.Append(fp8_keys, fp8_values);
  if (!past_keys.defined()) return LayerView{keys, values, 0, store_.size()};
  return LayerView{at::cat({past_keys, keys}, 2), at::cat({past_values, values}, 2), 0,
                   store_.size()};
}

absl::Status Fp8Layer::Crop(int64_t n) {
  const int64_t length = store_.size();
  if (n < 0) {
    store_.Truncate(std::max<int64_t>(length + n, 0));
  } else if (n > 0 && n < length) {
    store_.Truncate(n);
  }
  return absl::OkStatus();
}

absl::Status Fp8Layer::Reorder(const at::Tensor& beam_idx) {
  if (!store_.defined()) return absl::OkStatus();
  if (absl::Status s = CheckBatchIndices(beam_idx, BatchSize(), true); !s.ok()) return s;
  store_.SelectBatch(beam_idx);
  return absl::OkStatus();
}

absl::Status Fp8Layer::SelectIndices(const at::Tensor& indices) {
  if (!store_.defined()) return absl::OkStatus();
  if (absl::Status s = CheckBatchIndices(indices, BatchSize(), false); !s.ok()) return s;
  store_.SelectBatch(indices);
  return absl::OkStatus();
}

absl::Status Fp8Layer::RepeatInterleave(int64_t repeats) {
  if (repeats < 1) return absl::InvalidArgumentError("repeats must be >= 1");
  store_.RepeatInterleaveBatch(repeats);
  return absl::OkStatus();
}

std::unique_ptr<CacheLayer> Fp8Layer::Clone() const {
  auto copy = std::make_unique<Fp8Layer>();
  copy->store_ = store_.CloneCompact();
  copy->key_scale_ = key_scale_;
  copy->value_scale_ = value_scale_;
  copy->dtype_ = dtype_;
  return copy;
}

void Fp8Layer::Reset() {
  store_.Reset();
  key_scale_ = value_scale_ = 0;
}

}  // namespace kvserve::cache
