// The preallocated sliding-window cache layer (see static_sliding_window_layer.h).
#include "cache/static_sliding_window_layer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "cache/dynamic_layer.h"
#include "cache/static_layer.h"

namespace kvserve::cache {

StaticSlidingWindowLayer::StaticSlidingWindowLayer(LayerType type, int64_t window,
                                                   int64_t max_cache_len)
    : type_(type), window_(window), capacity_(std::min(window, max_cache_len)) {}

absl::StatusOr<LayerView> StaticSlidingWindowLayer::Update(const at::Tensor& keys,
                                                           const at::Tensor& values) {
  if (absl::Status s = CheckStaticUpdate(keys, values, keys_, values_); !s.ok()) return s;
  const int64_t n = keys.size(2);
  const int64_t c = length_;
  const int64_t e = capacity_;
  if (!keys_.defined()) {
    keys_ = at::zeros({keys.size(0), keys.size(1), e, keys.size(3)}, keys.options());
    values_ = at::zeros({values.size(0), values.size(1), e, values.size(3)}, values.options());
  }
  if (n == 0) {  // a read: nothing changes
    return c >= e ? LayerView{keys_, values_, c - e, e} : LayerView{keys_, values_, 0, c};
  }
  length_ += n;
  if (c >= e && n == 1) {
    // Roll left by one; source and destination overlap, so go through a copy.
    keys_.narrow(2, 0, e - 1).copy_(keys_.narrow(2, 1, e - 1).clone());
    values_.narrow(2, 0, e - 1).copy_(values_.narrow(2, 1, e - 1).clone());
    keys_.narrow(2, e - 1, 1).copy_(keys);
    values_.narrow(2, e - 1, 1).copy_(values);
    return LayerView{keys_, values_, c - e + 1, e};
  }
  if (c >= e || c + n > e) {
    // Full, or becoming full: attention sees every new token (the mask applies the window),
    // the buffer keeps the last E.
    const int64_t keep_from = c >= e ? 1 : 0;
    at::Tensor full_keys =
        at::cat({keys_.narrow(2, keep_from, std::min(c, e) - keep_from), keys}, 2);
    at::Tensor full_values =
        at::cat({values_.narrow(2, keep_from, std::min(c, e) - keep_from), values}, 2);
    const int64_t total = full_keys.size(2);
    keys_.copy_(full_keys.narrow(2, total - e, e));
    values_.copy_(full_values.narrow(2, total - e, e));
    return LayerView{full_keys, full_values, c >= e ? c - e + 1 : 0, total};
  }
  keys_.narrow(2, c, n).copy_(keys);
  values_.narrow(2, c, n).copy_(values);
  return LayerView{keys_, values_, 0, c + n};
}

absl::Status StaticSlidingWindowLayer::CheckCrop(int64_t n) const {
  if (length_ <= capacity_) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("cannot crop a static ", std::string(LayerTypeName(type_)),
                   " layer that has rolled past its ", capacity_,
                   " slots: the dropped states are gone (static caches do not record past "
                   "states; use a dynamic cache with ActivatePastRecording())"));
}

absl::Status StaticSlidingWindowLayer::Crop(int64_t n) {
  if (absl::Status s = CheckCrop(n); !s.ok()) return s;
  int64_t target = length_;
  if (n < 0) {
    target = std::max<int64_t>(length_ + n, 0);
  } else if (n > 0 && n < length_) {
    target = n;
  }
  if (target < length_) {
    keys_.narrow(2, target, length_ - target).zero_();
    values_.narrow(2, target, length_ - target).zero_();
    length_ = target;
  }
  return absl::OkStatus();
}

absl::Status StaticSlidingWindowLayer::Reorder(const at::Tensor& beam_idx) {
  if (!keys_.defined()) return absl::OkStatus();
  if (absl::Status s = CheckBatchIndices(beam_idx, BatchSize(), true); !s.ok()) return s;
  const at::Tensor idx = beam_idx.to(keys_.device(), at::kLong);
  keys_ = keys_.index_select(0, idx);
  values_ = values_.index_select(0, idx);
  return absl::OkStatus();
}

absl::Status StaticSlidingWindowLayer::SelectIndices(const at::Tensor& indices) {
  if (!keys_.defined()) return absl::OkStatus();
  if (absl::Status s = CheckBatchIndices(indices, BatchSize(), false); !s.ok()) return s;
  const at::Tensor idx = indices.to(keys_.device(), at::kLong);
  keys_ = keys_.index_select(0, idx);
  values_ = values_.index_select(0, idx);
  return absl::OkStatus();
}

absl::Status StaticSlidingWindowLayer::RepeatInterleave(int64_t repeats) {
  if (repeats < 1) return absl::InvalidArgumentError("repeats must be >= 1");
  if (!keys_.defined()) return absl::OkStatus();
  keys_ = keys_.repeat_interleave(repeats, 0);
  values_ = values_.repeat_interleave(repeats, 0);
  return absl::OkStatus();
}

MemoryUsage StaticSlidingWindowLayer::Memory() const {
  if (!keys_.defined()) return {};
  return {.device_bytes = static_cast<int64_t>(keys_.nbytes() + values_.nbytes())};
}

std::unique_ptr<CacheLayer> StaticSlidingWindowLayer::Clone() const {
  auto copy = std::make_unique<StaticSlidingWindowLayer>(type_, window_, capacity_);
  copy->length_ = length_;
  if (keys_.defined()) {
    copy->keys_ = keys_.clone(at::MemoryFormat::Contiguous);
    copy->values_ = values_.clone(at::MemoryFormat::Contiguous);
  }
  return copy;
}

void StaticSlidingWindowLayer::Reset() {
  keys_ = at::Tensor();
  values_ = at::Tensor();
  length_ = 0;
}

bool StaticSlidingWindowLayer::ForEachTensor(const std::function<void(at::Tensor&)>& fn) {
  if (keys_.defined()) {
    fn(keys_);
    fn(values_);
  }
  return true;
}

}  // namespace kvserve::cache
