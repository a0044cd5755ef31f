// DynamicSlidingWindowLayer: a sliding-window (or chunked-attention) layer that keeps only
// the tokens a future query can see.
#pragma once

#include "cache/cache_layer.h"
#include "cache/kv_buffer.h"

namespace kvserve::cache {

// Stores the last window-1 tokens (a query at position p sees keys > p - window: itself and
// window-1 earlier ones; a chunk of C tokens likewise needs at most C-1 earlier ones).
// Update returns the stored tokens plus every new one, so a prefill longer than the window
// attends over the whole prompt and the mask enforces the window. SeqLength is the number of
// tokens ever seen, not the number stored.
//
// Sharing: like DynamicLayer, it may read a prefix in place (AttachSharedPrefix) while the
// prefix lies inside what it keeps: its stored tokens are then the kept part of the shared
// segment (dropping old tokens only moves where that part starts, never writes) followed by
// its own tail; once the window has moved past the segment the layer lets it go. A crop into
// the segment copies what stays.
//
// Past recording keeps every token until the next Crop, which then rolls back as the
// reference does. Deliberate divergences from the reference: cropping more tokens than were
// recorded is OutOfRange instead of leaving a negative length or a short window.
class DynamicSlidingWindowLayer final : public CacheLayer {
 public:
  // `window` >= 2 (a window of 1 keeps no past and is refused by LayerSpec validation).
  DynamicSlidingWindowLayer(LayerType type, int64_t window);

  absl::StatusOr<LayerView> Update(const at::Tensor& keys, const at::Tensor& values) override;
  int64_t SeqLength() const override { return cumulative_length_; }
  int64_t MaxLength() const override { return window_; }
  int64_t BatchSize() const override {
    return buffer_.defined() ? buffer_.batch_size() : (prefix_keys_.defined() ? prefix_rows_ : 0);
  }
  absl::Status AttachSharedPrefix(const at::Tensor& keys, const at::Tensor& values) override;
  int64_t SharedPrefixLength() const override { return prefix_kept(); }
  absl::Status Crop(int64_t n) override;
  absl::Status CheckCrop(int64_t n) const override;
  void ActivatePastRecording() override { recording_ = true; }
  void RetainPast() override {
    recording_ = true;
    retain_ = true;
  }
  absl::Status Reorder(const at::Tensor& beam_idx) override;
  absl::Status SelectIndices(const at::Tensor& indices) override;
  absl::Status RepeatInterleave(int64_t repeats) override;
  // The own tail only: a shared segment is counted once, by whoever holds its snapshot.
  MemoryUsage Memory() const override { return {.device_bytes = buffer_.bytes()}; }
  std::unique_ptr<CacheLayer> Clone() const override;
  void Reset() override;
  LayerType type() const override { return type_; }
  bool ForEachTensor(const std::function<void(at::Tensor&)>& fn) override {
    buffer_.ForEachTensor(fn);
    return true;
  }

  // Tokens physically stored (<= window-1 unless recording).
  int64_t num_stored_tokens() const { return prefix_kept() + buffer_.size(); }
  bool recording() const { return recording_; }

 private:
  // Drops stored tokens older than the last window-1 (the shared segment's first).
  void TrimToWindow();
  // Keeps the first `n` stored tokens; a cut into the shared segment copies what stays.
  void TruncateStored(int64_t n);
  // Columns of the shared segment still stored (0 without one).
  int64_t prefix_kept() const {
    return prefix_keys_.defined() ? prefix_keys_.size(2) - prefix_begin_ : 0;
  }
  void DropPrefix();

  LayerType type_;
  int64_t window_;
  int64_t cumulative_length_ = 0;
  bool recording_ = false;
  bool retain_ = false;       // RetainPast: crops never drop recorded tokens
  KvBuffer buffer_;           // the own tail: the stored tokens after the shared segment's
  at::Tensor prefix_keys_;    // [1, kv_heads, P, head_dim]; read-only; undefined: none
  at::Tensor prefix_values_;  // [1, kv_heads, P, head_dim]
  int64_t prefix_begin_ = 0;  // its first column still stored
  int64_t prefix_rows_ = 1;   // batch rows while the tail is still empty
};

}  // namespace kvserve::cache
