// OffloadedLayer: keeps any cache layer's storage on the host except around its update.
#pragma once

#include <memory>
#include <optional>

#include "cache/cache_layer.h"
#include "cache/offload_stream.h"

namespace kvserve::cache {

// Wraps a layer of any strategy (which must support ForEachTensor). Its storage is resident
// on the device (the one its first update came from) only while KvCache::Update works on
// it: BeforeUpdate waits for the prefetch (or fetches now), AfterUpdate writes the storage
// back to the host. Memory() reports the wrapped layer's bytes as device bytes while
// resident and as host bytes otherwise, so accounting is exact on CPU builds too, where
// both copies are host memory. Every other operation (crop, beam helpers, clone) works on
// the storage wherever it is.
class OffloadedLayer final : public CacheLayer {
 public:
  // `inner` must return true from ForEachTensor; `stream` is shared by a cache's layers.
  OffloadedLayer(std::unique_ptr<CacheLayer> inner, std::shared_ptr<OffloadStream> stream);
  // Wraps a layer that already holds tokens and writes its storage back to the host now (the
  // out-of-memory fallback). The storage must be on one device; an empty layer is wrapped as
  // it is.
  static std::unique_ptr<OffloadedLayer> Adopt(std::unique_ptr<CacheLayer> inner,
                                               std::shared_ptr<OffloadStream> stream);

  absl::StatusOr<LayerView> Update(const at::Tensor& keys, const at::Tensor& values) override;
  int64_t SeqLength() const override { return inner_->SeqLength(); }
  int64_t MaxLength() const override { return inner_->MaxLength(); }
  int64_t BatchSize() const override { return inner_->BatchSize(); }
  absl::Status Crop(int64_t n) override;
  absl::Status CheckCrop(int64_t n) const override { return inner_->CheckCrop(n); }
  void ActivatePastRecording() override { inner_->ActivatePastRecording(); }
  void RetainPast() override { inner_->RetainPast(); }
  absl::Status Reorder(const at::Tensor& beam_idx) override;
  absl::Status SelectIndices(const at::Tensor& indices) override;
  absl::Status RepeatInterleave(int64_t repeats) override;
  MemoryUsage Memory() const override;
  std::unique_ptr<CacheLayer> Clone() const override;
  void Reset() override;
  LayerType type() const override { return inner_->type(); }
  bool ContentsDependOnUpdateSplit() const override {
    return inner_->ContentsDependOnUpdateSplit();
  }
  // A wrapped layer that read a shared segment keeps reading it (it stays on the device, counted
  // once with its snapshot); a new one is never attached (the offloaded strategy copies).
  int64_t SharedPrefixLength() const override { return inner_->SharedPrefixLength(); }
  bool ForEachTensor(const std::function<void(at::Tensor&)>& fn) override {
    return inner_->ForEachTensor(fn);
  }

  bool offloaded() const override { return true; }
  std::unique_ptr<CacheLayer> RollbackPoint() const override { return inner_->RollbackPoint(); }
  void RestoreRollbackPoint(std::unique_ptr<CacheLayer> point) override {
    inner_->RestoreRollbackPoint(std::move(point));
  }
  void StartPrefetch() override;
  void BeforeUpdate() override;
  void AfterUpdate() override;

  // Unwraps the layer: its storage goes back to the device it came from (where it stays, as
  // the wrapped strategy keeps it) and the wrapped layer is returned. This layer is empty
  // afterwards and must be dropped.
  std::unique_ptr<CacheLayer> Release();

  // Whether the storage is on the device now (prefetched or being updated).
  bool resident() const { return resident_; }
  const CacheLayer& inner() const { return *inner_; }

 private:
  // Waits for copies in flight (write-backs, prefetches) before storage is touched outside
  // an update.
  void Settle() const;

  std::unique_ptr<CacheLayer> inner_;
  std::shared_ptr<OffloadStream> stream_;
  std::optional<c10::Device> device_;  // where updates come from; set by the first update
  bool resident_ = false;
  mutable bool prefetch_pending_ = false;  // copied on the side stream, not yet joined
  mutable bool write_back_pending_ = false;
};

}  // namespace kvserve::cache
