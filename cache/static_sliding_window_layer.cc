// The preallocated sliding-window cache layer (see static_sliding_window_layer.h).
#include "cache/static_sliding_window_layer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace kvserve::cache {

StaticSlidingWindowLayer::StaticSlidingWindowLayer(LayerType type, int64_t window,
                                                   int64_t max_cache_len)
    : type_(type), window_(window), capacity_(std::min(window, max_cache_len)) {}

absl::StatusOr<LayerView> StaticSlidingWindowLayer::Update(const at::Tensor& keys,
                                                           const at::Tensor& values) {
  if (absl::Status s = CheckStaticUpdate(keys, values, buffers_.keys(), buffers_.values());
      !s.ok()) {
    return s;
  }
  const int64_t n = keys.size(2);
  const int64_t c = length_;
  const int64_t e = capacity_;
  buffers_.EnsureAllocated(keys, values, e);
  at::Tensor& stored_keys = buffers_.keys();
  at::Tensor& stored_values = buffers_.values();
  if (n == 0) {  // a read: nothing changes
    return c >= e ? LayerView{stored_keys, stored_values, c - e, e}
                  : LayerView{stored_keys, stored_values, 0, c};
  }
  length_ += n;
  if (c >= e && n == 1) {
    // Roll left by one; source and destination overlap, so go through a copy.
    stored_keys.narrow(2, 0, e - 1).copy_(stored_keys.narrow(2, 1, e - 1).clone());
    stored_values.narrow(2, 0, e - 1).copy_(stored_values.narrow(2, 1, e - 1).clone());
    stored_keys.narrow(2, e - 1, 1).copy_(keys);
    stored_values.narrow(2, e - 1, 1).copy_(values);
    return LayerView{stored_keys, stored_values, c - e + 1, e};
  }
  if (c >= e || c + n > e) {
    // Full, or becoming full: attention sees every new token (the mask applies the window),
    // the buffer keeps the last E.
    const int64_t keep_from = c >= e ? 1 : 0;
    at::Tensor full_keys =
        at::cat({stored_keys.narrow(2, keep_from, std::min(c, e) - keep_from), keys}, 2);
    at::Tensor full_values =
        at::cat({stored_values.narrow(2, keep_from, std::min(c, e) - keep_from), values}, 2);
    const int64_t total = full_keys.size(2);
    stored_keys.copy_(full_keys.narrow(2, total - e, e));
    stored_values.copy_(full_values.narrow(2, total - e, e));
    return LayerView{full_keys, full_values, c >= e ? c - e + 1 : 0, total};
  }
  stored_keys.narrow(2, c, n).copy_(keys);
  stored_values.narrow(2, c, n).copy_(values);
  return LayerView{stored_keys, stored_values, 0, c + n};
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
  const int64_t target = CropTarget(length_, n);
  buffers_.ZeroSlots(target, length_ - target);
  length_ = target;
  return absl::OkStatus();
}

absl::Status StaticSlidingWindowLayer::Reorder(const at::Tensor& beam_idx) {
  return buffers_.SelectRows(beam_idx, /*same_size=*/true);
}

absl::Status StaticSlidingWindowLayer::SelectIndices(const at::Tensor& indices) {
  return buffers_.SelectRows(indices, /*same_size=*/false);
}

absl::Status StaticSlidingWindowLayer::RepeatInterleave(int64_t repeats) {
  return buffers_.RepeatInterleave(repeats);
}

MemoryUsage StaticSlidingWindowLayer::Memory() const { return buffers_.Memory(); }

std::unique_ptr<CacheLayer> StaticSlidingWindowLayer::Clone() const {
  auto copy = std::make_unique<StaticSlidingWindowLayer>(type_, window_, capacity_);
  copy->length_ = length_;
  copy->buffers_ = buffers_.Clone();
  return copy;
}

void StaticSlidingWindowLayer::Reset() {
  buffers_.Reset();
  length_ = 0;
}

bool StaticSlidingWindowLayer::ForEachTensor(const std::function<void(at::Tensor&)>& fn) {
  buffers_.ForEachTensor(fn);
  return true;
}

}  // namespace kvserve::cache
