// DynamicLayer: a full-attention layer whose cache grows with every token.
#pragma once

#include "cache/cache_layer.h"
#include "cache/kv_buffer.h"

namespace kvserve::cache {

// Keeps every token. Update returns every stored token (kv_offset 0). Crop(n < 0) removes
// the last -n tokens (all of them when -n >= length); a positive n is the legacy absolute
// target length of the reference and shrinks only.
//
// Sharing: a dynamic layer never rewrites its past in place (it only appends, truncates and
// selects rows), so it may read a prefix in place (AttachSharedPrefix): its tokens are then
// the shared segment (one row, read by every batch row) followed by its own tail. A crop
// that reaches into the segment copies the part that stays into the tail and lets the
// segment go (copy on write); beam reorders and row changes touch only the tail.
class DynamicLayer final : public CacheLayer {
 public:
  DynamicLayer() = default;

  absl::StatusOr<LayerView> Update(const at::Tensor& keys, const at::Tensor& values) override;
  int64_t SeqLength() const override { return SharedPrefixLength() + buffer_.size(); }
  int64_t MaxLength() const override { return -1; }
  int64_t BatchSize() const override {
    return buffer_.defined() ? buffer_.batch_size() : (prefix_keys_.defined() ? prefix_rows_ : 0);
  }
  absl::Status AttachSharedPrefix(const at::Tensor& keys, const at::Tensor& values) override;
  int64_t SharedPrefixLength() const override {
    return prefix_keys_.defined() ? prefix_keys_.size(2) : 0;
  }
  absl::Status Crop(int64_t n) override;
  absl::Status Reorder(const at::Tensor& beam_idx) override;
  absl::Status SelectIndices(const at::Tensor& indices) override;
  absl::Status RepeatInterleave(int64_t repeats) override;
  // The own tail only: a shared segment is counted once, by whoever holds its snapshot.
  MemoryUsage Memory() const override { return {.device_bytes = buffer_.bytes()}; }
  // A deep copy of the tail; a shared segment stays shared (it is immutable).
  std::unique_ptr<CacheLayer> Clone() const override;
  void Reset() override;
  LayerType type() const override { return LayerType::kFullAttention; }
  bool ForEachTensor(const std::function<void(at::Tensor&)>& fn) override {
    buffer_.ForEachTensor(fn);
    return true;
  }

  // The stored tokens, [batch, kv_heads, SeqLength(), head_dim]: views into the layer's
  // storage (not its spare capacity), valid until the next mutating call; undefined tensors
  // before the first update. Readers must not write through them. With a shared segment, a
  // new tensor joining it (for every row) and the tail (a snapshot's capture).
  at::Tensor keys() const;
  at::Tensor values() const;

 private:
  // Replaces the shared segment by an own copy of its first `keep` tokens followed by the
  // tail's (copy on write before a crop into the segment).
  void MaterializePrefix(int64_t keep);

  KvBuffer buffer_;           // the own tail (everything without a shared segment)
  at::Tensor prefix_keys_;    // [1, kv_heads, P, head_dim]; read-only; undefined: none
  at::Tensor prefix_values_;  // [1, kv_heads, P, head_dim]
  int64_t prefix_rows_ = 1;   // batch rows while the tail is still empty
};

// OK when `keys` and `values` can be a shared prefix segment (CacheLayer::AttachSharedPrefix):
// defined, of one shape [1, kv_heads, n >= 1, head_dim]; InvalidArgument otherwise.
absl::Status CheckSharedSegment(const at::Tensor& keys, const at::Tensor& values);
// OK when an update's `keys` can follow a shared segment whose keys are `prefix_keys` (rows
// `prefix_rows` for the tail's first update, i.e. unless `tail_started`; the segment's kv_heads,
// head_dim, dtype and device); InvalidArgument naming what the segment needs otherwise.
absl::Status CheckContinuesSegment(const at::Tensor& keys, const at::Tensor& prefix_keys,
                                   int64_t prefix_rows, bool tail_started);
// Checks a batch index tensor against `batch_size`; shared by the layer classes.
absl::Status CheckBatchIndices(const at::Tensor& indices, int64_t batch_size, bool same_size);

}  // namespace kvserve::cache
