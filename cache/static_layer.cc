// The preallocated full-attention cache layer (see static_layer.h).
#include "cache/static_layer.h"

#include "absl/strings/str_cat.h"

namespace kvserve::cache {

StaticLayer::StaticLayer(int64_t max_cache_len) : max_cache_len_(max_cache_len) {}

absl::StatusOr<LayerView> StaticLayer::Update(const at::Tensor& keys, const at::Tensor& values) {
  if (absl::Status s = CheckStaticUpdate(keys, values, buffers_.keys(), buffers_.values());
      !s.ok()) {
    return s;
  }
  const int64_t n = keys.size(2);
  if (length_ + n > max_cache_len_) {
    return absl::OutOfRangeError(
        absl::StrCat("static cache layer is full: it holds ", length_, " of max_cache_len ",
                     max_cache_len_, " tokens and cannot take ", n,
                     " more; build the cache with max_cache_len >= ", length_ + n));
  }
  buffers_.EnsureAllocated(keys, values, max_cache_len_);
  buffers_.keys().narrow(2, length_, n).copy_(keys);
  buffers_.values().narrow(2, length_, n).copy_(values);
  length_ += n;
  return LayerView{buffers_.keys(), buffers_.values(), 0, length_};
}

absl::Status StaticLayer::Crop(int64_t n) {
  const int64_t target = CropTarget(length_, n);
  // Freed slots go back to zero so the buffer looks as if those tokens were never written.
  buffers_.ZeroSlots(target, length_ - target);
  length_ = target;
  return absl::OkStatus();
}

absl::Status StaticLayer::Reorder(const at::Tensor& beam_idx) {
  return buffers_.SelectRows(beam_idx, /*same_size=*/true);
}

absl::Status StaticLayer::SelectIndices(const at::Tensor& indices) {
  return buffers_.SelectRows(indices, /*same_size=*/false);
}

absl::Status StaticLayer::RepeatInterleave(int64_t repeats) {
  return buffers_.RepeatInterleave(repeats);
}

MemoryUsage StaticLayer::Memory() const { return buffers_.Memory(); }

std::unique_ptr<CacheLayer> StaticLayer::Clone() const {
  auto copy = std::make_unique<StaticLayer>(max_cache_len_);
  copy->length_ = length_;
  copy->buffers_ = buffers_.Clone();
  return copy;
}

void StaticLayer::Reset() {
  buffers_.Reset();
  length_ = 0;
}

bool StaticLayer::ForEachTensor(const std::function<void(at::Tensor&)>& fn) {
  buffers_.ForEachTensor(fn);
  return true;
}

}  // namespace kvserve::cache
