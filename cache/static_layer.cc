// The preallocated full-attention cache layer (see static_layer.h).
#include "cache/static_layer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "cache/dynamic_layer.h"

namespace kvserve::cache {
namespace {

std::string ShapeString(const at::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) absl::StrAppend(&s, i ? ", " : "", t.size(i));
  return s + "]";
}

}  // namespace

absl::Status CheckStaticUpdate(const at::Tensor& keys, const at::Tensor& values,
                               const at::Tensor& stored_keys, const at::Tensor& stored_values) {
  if (!keys.defined() || !values.defined() || keys.dim() != 4 || values.dim() != 4) {
    return absl::InvalidArgumentError(
        "cache update needs 4-D keys and values [batch, kv_heads, tokens, head_dim]");
  }
  for (int d = 0; d < 3; ++d) {
    if (keys.size(d) != values.size(d)) {
      return absl::InvalidArgumentError(absl::StrCat("cache update: keys ", ShapeString(keys),
                                                     " and values ", ShapeString(values),
                                                     " differ in batch, heads or tokens"));
    }
  }
  if (!stored_keys.defined()) return absl::OkStatus();
  if (keys.size(0) != stored_keys.size(0) || keys.size(1) != stored_keys.size(1) ||
      keys.size(3) != stored_keys.size(3) || values.size(3) != stored_values.size(3)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cache update: keys ", ShapeString(keys), " / values ", ShapeString(values),
                     " do not match the stored buffers ", ShapeString(stored_keys), " / ",
                     ShapeString(stored_values)));
  }
  if (keys.scalar_type() != stored_keys.scalar_type() ||
      values.scalar_type() != stored_values.scalar_type() ||
      keys.device() != stored_keys.device() || values.device() != stored_values.device()) {
    return absl::InvalidArgumentError("cache update: dtype or device differs from the cache's");
  }
  return absl::OkStatus();
}

StaticLayer::StaticLayer(int64_t max_cache_len) : max_cache_len_(max_cache_len) {}

absl::StatusOr<LayerView> StaticLayer::Update(const at::Tensor& keys, const at::Tensor& values) {
  if (absl::Status s = CheckStaticUpdate(keys, values, keys_, values_); !s.ok()) return s;
  const int64_t n = keys.size(2);
  if (length_ + n > max_cache_len_) {
    return absl::OutOfRangeError(
        absl::StrCat("static cache layer is full: it holds ", length_, " of max_cache_len ",
                     max_cache_len_, " tokens and cannot take ", n,
                     " more; build the cache with max_cache_len >= ", length_ + n));
  }
  if (!keys_.defined()) {
    keys_ = at::zeros({keys.size(0), keys.size(1), max_cache_len_, keys.size(3)}, keys.options());
    values_ = at::zeros({values.size(0), values.size(1), max_cache_len_, values.size(3)},
                        values.options());
  }
  keys_.narrow(2, length_, n).copy_(keys);
  values_.narrow(2, length_, n).copy_(values);
  length_ += n;
  return LayerView{keys_, values_, 0, length_};
}

absl::Status StaticLayer::Crop(int64_t n) {
  int64_t target = length_;
  if (n < 0) {
    target = std::max<int64_t>(length_ + n, 0);
  } else if (n > 0 && n < length_) {
    target = n;  // legacy absolute target length, as DynamicLayer
  }
  if (target < length_) {
    // Freed slots go back to zero so the buffer looks as if those tokens were never written.
    keys_.narrow(2, target, length_ - target).zero_();
    values_.narrow(2, target, length_ - target).zero_();
    length_ = target;
  }
  return absl::OkStatus();
}

absl::Status StaticLayer::Reorder(const at::Tensor& beam_idx) {
  if (!keys_.defined()) return absl::OkStatus();
  if (absl::Status s = CheckBatchIndices(beam_idx, BatchSize(), true); !s.ok()) return s;
  const at::Tensor idx = beam_idx.to(keys_.device(), at::kLong);
  keys_ = keys_.index_select(0, idx);
  values_ = values_.index_select(0, idx);
  return absl::OkStatus();
}

absl::Status StaticLayer::SelectIndices(const at::Tensor& indices) {
  if (!keys_.defined()) return absl::OkStatus();
  if (absl::Status s = CheckBatchIndices(indices, BatchSize(), false); !s.ok()) return s;
  const at::Tensor idx = indices.to(keys_.device(), at::kLong);
  keys_ = keys_.index_select(0, idx);
  values_ = values_.index_select(0, idx);
  return absl::OkStatus();
}

absl::Status StaticLayer::RepeatInterleave(int64_t repeats) {
  if (repeats < 1) return absl::InvalidArgumentError("repeats must be >= 1");
  if (!keys_.defined()) return absl::OkStatus();
  keys_ = keys_.repeat_interleave(repeats, 0);
  values_ = values_.repeat_interleave(repeats, 0);
  return absl::OkStatus();
}

MemoryUsage StaticLayer::Memory() const {
  if (!keys_.defined()) return {};
  return {.device_bytes = static_cast<int64_t>(keys_.nbytes() + values_.nbytes())};
}

std::unique_ptr<CacheLayer> StaticLayer::Clone() const {
  auto copy = std::make_unique<StaticLayer>(max_cache_len_);
  copy->length_ = length_;
  if (keys_.defined()) {
    copy->keys_ = keys_.clone(at::MemoryFormat::Contiguous);
    copy->values_ = values_.clone(at::MemoryFormat::Contiguous);
  }
  return copy;
}

void StaticLayer::Reset() {
  keys_ = at::Tensor();
  values_ = at::Tensor();
  length_ = 0;
}

bool StaticLayer::ForEachTensor(const std::function<void(at::Tensor&)>& fn) {
  if (keys_.defined()) {
    fn(keys_);
    fn(values_);
  }
  return true;
}

}  // namespace kvserve::cache
