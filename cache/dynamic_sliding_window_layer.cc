// The sliding-window / chunked dynamic cache layer (see dynamic_sliding_window_layer.h).
#include "cache/dynamic_sliding_window_layer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "cache/dynamic_layer.h"

namespace kvserve::cache {

DynamicSlidingWindowLayer::DynamicSlidingWindowLayer(LayerType type, int64_t window)
    : type_(type), window_(window) {}

absl::StatusOr<LayerView> DynamicSlidingWindowLayer::Update(const at::Tensor& keys,
                                                            const at::Tensor& values) {
  if (absl::Status s = buffer_.CheckAppend(keys, values); !s.ok()) return s;
  if (prefix_keys_.defined()) {
    absl::Status s = CheckContinuesSegment(keys, prefix_keys_, prefix_rows_, buffer_.defined());
    if (!s.ok()) return s;
  }
  const int64_t n = keys.size(2);
  // Headroom past the window so that the live tokens move back to the front only every
  // quarter window, not every step.
  const int64_t keep = window_ - 1;
  const int64_t headroom = std::max<int64_t>(keep / 4, KvBuffer::kGranuleTokens);
  buffer_.Append(keys, values, keep + headroom + n);
  const int64_t stored = num_stored_tokens();
  LayerView view{buffer_.keys(), buffer_.values(), cumulative_length_ + n - stored, buffer_.size()};
  if (const int64_t kept = prefix_kept(); kept > 0) {
    view.prefix_keys = prefix_keys_.narrow(2, prefix_begin_, kept);
    view.prefix_values = prefix_values_.narrow(2, prefix_begin_, kept);
  }
  cumulative_length_ += n;
  if (!recording_) TrimToWindow();
  return view;
}

absl::Status DynamicSlidingWindowLayer::AttachSharedPrefix(const at::Tensor& keys,
                                                           const at::Tensor& values) {
  if (cumulative_length_ != 0 || buffer_.defined()) {
    return absl::FailedPreconditionError("a shared prefix attaches only to an empty layer");
  }
  if (absl::Status s = CheckSharedSegment(keys, values); !s.ok()) return s;
  prefix_keys_ = keys;
  prefix_values_ = values;
  prefix_begin_ = 0;
  prefix_rows_ = 1;
  cumulative_length_ = keys.size(2);
  if (!recording_) TrimToWindow();
  return absl::OkStatus();
}

void DynamicSlidingWindowLayer::DropPrefix() {
  prefix_keys_ = at::Tensor();
  prefix_values_ = at::Tensor();
  prefix_begin_ = 0;
  prefix_rows_ = 1;
}

void DynamicSlidingWindowLayer::TrimToWindow() {
  if (retain_) return;
  int64_t excess = num_stored_tokens() - (window_ - 1);
  if (excess <= 0) return;
  // The oldest tokens are the segment's: dropping them only moves where its kept part starts.
  const int64_t from_prefix = std::min(excess, prefix_kept());
  prefix_begin_ += from_prefix;
  excess -= from_prefix;
  if (prefix_keys_.defined() && prefix_kept() == 0) DropPrefix();
  if (excess > 0) buffer_.DropFront(excess);
}

void DynamicSlidingWindowLayer::TruncateStored(int64_t n) {
  const int64_t kept = prefix_kept();
  if (n >= kept) {
    buffer_.Truncate(n - kept);
    return;
  }
  // Copy on write: the segment is never cut in place; what stays of it becomes the tail.
  const int64_t rows = BatchSize();
  KvBuffer own;
  if (n > 0) {
    own.Append(prefix_keys_.narrow(2, prefix_begin_, n).expand({rows, -1, -1, -1}),
               prefix_values_.narrow(2, prefix_begin_, n).expand({rows, -1, -1, -1}));
  }
  buffer_ = std::move(own);
  DropPrefix();
}

absl::Status DynamicSlidingWindowLayer::CheckCrop(int64_t n) const {
  if (cumulative_length_ < window_) return absl::OkStatus();  // nothing was dropped yet
  if (!recording_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot crop a ", LayerTypeName(type_), " layer whose window (", window_,
        ") has filled: its past states are gone; call ActivatePastRecording() before the "
        "forward"));
  }
  if (n > 0) {
    return absl::InvalidArgumentError(
        "crop of a filled sliding-window layer takes n <= 0 (tokens to remove)");
  }
  // After the crop the layer must still hold the window-1 tokens (or all of them, if fewer)
  // that precede the new end; recording that started late may not have kept them.
  const int64_t remove = -n;
  const int64_t stored = num_stored_tokens();
  const int64_t needed = std::min(window_ - 1, cumulative_length_ - remove);
  if (remove > cumulative_length_ || stored - remove < needed) {
    return absl::OutOfRangeError(absl::StrCat(
        "cannot crop ", remove, " tokens from a ", LayerTypeName(type_), " layer: ", stored,
        " tokens are recorded, which does not reach back far enough"));
  }
  return absl::OkStatus();
}

absl::Status DynamicSlidingWindowLayer::Crop(int64_t n) {
  if (absl::Status s = CheckCrop(n); !s.ok()) return s;
  const int64_t stored = num_stored_tokens();
  if (cumulative_length_ < window_) {
    // The window never filled: every token is still stored, so this is a plain crop.
    if (n < 0) {
      TruncateStored(std::max<int64_t>(stored + n, 0));
    } else if (n > 0 && n < stored) {
      TruncateStored(n);
    }
    cumulative_length_ = num_stored_tokens();
    return absl::OkStatus();
  }
  TruncateStored(stored + n);
  cumulative_length_ += n;
  // Keep exactly what a layer that never recorded would hold at this length.
  TrimToWindow();
  return absl::OkStatus();
}

absl::Status DynamicSlidingWindowLayer::Reorder(const at::Tensor& beam_idx) {
  if (!buffer_.defined()) return absl::OkStatus();
  if (absl::Status s = CheckBatchIndices(beam_idx, BatchSize(), true); !s.ok()) return s;
  buffer_.SelectBatch(beam_idx);
  return absl::OkStatus();
}

absl::Status DynamicSlidingWindowLayer::SelectIndices(const at::Tensor& indices) {
  if (!buffer_.defined() && !prefix_keys_.defined()) return absl::OkStatus();
  if (absl::Status s = CheckBatchIndices(indices, BatchSize(), false); !s.ok()) return s;
  if (!buffer_.defined()) {
    prefix_rows_ = indices.size(0);
    return absl::OkStatus();
  }
  buffer_.SelectBatch(indices);
  return absl::OkStatus();
}

absl::Status DynamicSlidingWindowLayer::RepeatInterleave(int64_t repeats) {
  if (repeats < 1) return absl::InvalidArgumentError("repeats must be >= 1");
  if (!buffer_.defined() && prefix_keys_.defined()) prefix_rows_ *= repeats;
  buffer_.RepeatInterleaveBatch(repeats);
  return absl::OkStatus();
}

std::unique_ptr<CacheLayer> DynamicSlidingWindowLayer::Clone() const {
  auto copy = std::make_unique<DynamicSlidingWindowLayer>(type_, window_);
  copy->cumulative_length_ = cumulative_length_;
  copy->recording_ = recording_;
  copy->retain_ = retain_;
  copy->buffer_ = buffer_.CloneCompact();
  copy->prefix_keys_ = prefix_keys_;  // immutable: stays shared
  copy->prefix_values_ = prefix_values_;
  copy->prefix_begin_ = prefix_begin_;
  copy->prefix_rows_ = prefix_rows_;
  return copy;
}

void DynamicSlidingWindowLayer::Reset() {
  DropPrefix();
  buffer_.Reset();
  cumulative_length_ = 0;
}

}  // namespace kvserve::cache
