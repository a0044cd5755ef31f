// A cache layer whose storage lives on the host between updates (see offloaded_layer.h).
#include "cache/offloaded_layer.h"

namespace kvserve::cache {

OffloadedLayer::OffloadedLayer(std::unique_ptr<CacheLayer> inner,
                               std::shared_ptr<OffloadStream> stream)
    : inner_(std::move(inner)), stream_(std::move(stream)) {}

void OffloadedLayer::Settle() const {
  if (!device_) return;
  if (write_back_pending_) {
    stream_->SyncHost(*device_);
    write_back_pending_ = false;
  }
  if (prefetch_pending_) {
    stream_->Join(*device_);
    prefetch_pending_ = false;
  }
}

void OffloadedLayer::StartPrefetch() {
  if (resident_ || !device_) return;  // already there, or nothing stored yet
  stream_->CopyToDevice(*inner_, *device_);
  resident_ = true;
  prefetch_pending_ = true;
}

std::unique_ptr<OffloadedLayer> OffloadedLayer::Adopt(std::unique_ptr<CacheLayer> inner,
                                                      std::shared_ptr<OffloadStream> stream) {
  std::optional<c10::Device> device;
  inner->ForEachTensor([&](at::Tensor& t) {
    if (t.defined() && !device) device = t.device();
  });
  auto layer = std::make_unique<OffloadedLayer>(std::move(inner), std::move(stream));
  if (device) {
    layer->device_ = device;
    layer->resident_ = true;
    layer->AfterUpdate();  // write the storage back to the host
  }
  return layer;
}

void OffloadedLayer::BeforeUpdate() {
  if (!device_) {
    resident_ = true;  // nothing stored yet: the first update allocates on the device
    return;
  }
  StartPrefetch();
  if (prefetch_pending_) {
    stream_->Join(*device_);
    prefetch_pending_ = false;
  }
}

void OffloadedLayer::AfterUpdate() {
  if (!resident_) return;
  if (prefetch_pending_ && device_) {
    stream_->Join(*device_);
    prefetch_pending_ = false;
  }
  stream_->CopyToHost(*inner_);
  resident_ = false;
  write_back_pending_ = true;
}

absl::StatusOr<LayerView> OffloadedLayer::Update(const at::Tensor& keys, const at::Tensor& values) {
  // Called directly (not through KvCache::Update) the layer still has to be on the device.
  if (!resident_ || prefetch_pending_) BeforeUpdate();
  if (!device_ && keys.defined()) device_ = keys.device();
  return inner_->Update(keys, values);
}

absl::Status OffloadedLayer::Crop(int64_t n) {
  Settle();
  return inner_->Crop(n);
}

absl::Status OffloadedLayer::Reorder(const at::Tensor& beam_idx) {
  Settle();
  return inner_->Reorder(beam_idx);
}

absl::Status OffloadedLayer::SelectIndices(const at::Tensor& indices) {
  Settle();
  return inner_->SelectIndices(indices);
}

absl::Status OffloadedLayer::RepeatInterleave(int64_t repeats) {
  Settle();
  return inner_->RepeatInterleave(repeats);
}

std::unique_ptr<CacheLayer> OffloadedLayer::Release() {
  Settle();
  if (device_ && !resident_) {
    inner_->ForEachTensor([&](at::Tensor& t) {
      if (t.defined()) t = t.to(*device_);
    });
  }
  resident_ = false;
  return std::move(inner_);
}

MemoryUsage OffloadedLayer::Memory() const {
  const int64_t bytes = inner_->Memory().total();
  return resident_ ? MemoryUsage{.device_bytes = bytes} : MemoryUsage{.host_bytes = bytes};
}

std::unique_ptr<CacheLayer> OffloadedLayer::Clone() const {
  Settle();
  auto copy = std::make_unique<OffloadedLayer>(inner_->Clone(), stream_);
  copy->device_ = device_;
  copy->resident_ = resident_;
  return copy;
}

void OffloadedLayer::Reset() {
  Settle();
  inner_->Reset();
  resident_ = false;
  prefetch_pending_ = false;
  device_.reset();
}

}  // namespace kvserve::cache
