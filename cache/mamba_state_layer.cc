// The Mamba layer's convolution and SSM states (see mamba_state_layer.h).
#include "cache/mamba_state_layer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "cache/dynamic_layer.h"

namespace kvserve::cache {

absl::StatusOr<LayerView> MambaStateLayer::Update(const at::Tensor&, const at::Tensor&) {
  return absl::FailedPreconditionError(
      "a Mamba state layer holds convolution and SSM states, not keys/values");
}

absl::Status MambaStateLayer::CheckCrop(int64_t n) const {
  const bool drops = n < 0 ? seq_length_ > 0 : (n > 0 && n < seq_length_);
  if (!drops) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "a Mamba state cannot be cropped (", seq_length_, " tokens held, crop ", n,
      "): its convolution and SSM states summarise every token seen, so only the whole state "
      "is reusable"));
}

absl::Status MambaStateLayer::Crop(int64_t n) { return CheckCrop(n); }

absl::Status MambaStateLayer::Reorder(const at::Tensor& beam_idx) {
  if (!conv_.defined()) return absl::OkStatus();
  if (absl::Status s = CheckBatchIndices(beam_idx, BatchSize(), true); !s.ok()) return s;
  const at::Tensor idx = beam_idx.to(conv_.device(), at::kLong);
  conv_ = conv_.index_select(0, idx);
  ssm_ = ssm_.index_select(0, idx);
  return absl::OkStatus();
}

absl::Status MambaStateLayer::SelectIndices(const at::Tensor& indices) {
  if (!conv_.defined()) return absl::OkStatus();
  if (absl::Status s = CheckBatchIndices(indices, BatchSize(), false); !s.ok()) return s;
  const at::Tensor idx = indices.to(conv_.device(), at::kLong);
  conv_ = conv_.index_select(0, idx);
  ssm_ = ssm_.index_select(0, idx);
  return absl::OkStatus();
}

absl::Status MambaStateLayer::RepeatInterleave(int64_t repeats) {
  if (repeats < 1) {
    return absl::InvalidArgumentError(absl::StrCat("repeats must be >= 1, got ", repeats));
  }
  if (!conv_.defined() || repeats == 1) return absl::OkStatus();
  conv_ = conv_.repeat_interleave(repeats, 0);
  ssm_ = ssm_.repeat_interleave(repeats, 0);
  return absl::OkStatus();
}

MemoryUsage MambaStateLayer::Memory() const {
  if (!conv_.defined()) return {};
  return {.device_bytes = static_cast<int64_t>(conv_.nbytes() + ssm_.nbytes())};
}

std::unique_ptr<CacheLayer> MambaStateLayer::Clone() const {
  auto copy = std::make_unique<MambaStateLayer>();
  if (conv_.defined()) {
    copy->conv_ = conv_.clone();
    copy->ssm_ = ssm_.clone();
  }
  copy->seq_length_ = seq_length_;
  return copy;
}

void MambaStateLayer::Reset() {
  conv_ = at::Tensor();
  ssm_ = at::Tensor();
  seq_length_ = 0;
}

std::unique_ptr<CacheLayer> MambaStateLayer::RollbackPoint() const {
  // Shares the tensors: SetStates replaces them, nothing writes into them.
  auto point = std::make_unique<MambaStateLayer>();
  point->conv_ = conv_;
  point->ssm_ = ssm_;
  point->seq_length_ = seq_length_;
  return point;
}

void MambaStateLayer::RestoreRollbackPoint(std::unique_ptr<CacheLayer> point) {
  auto* p = static_cast<MambaStateLayer*>(point.get());
  conv_ = std::move(p->conv_);
  ssm_ = std::move(p->ssm_);
  seq_length_ = p->seq_length_;
}

bool MambaStateLayer::ForEachTensor(const std::function<void(at::Tensor&)>& fn) {
  if (conv_.defined()) {
    fn(conv_);
    fn(ssm_);
  }
  return true;
}

void MambaStateLayer::SetStates(at::Tensor conv, at::Tensor ssm, int64_t added_tokens) {
  conv_ = std::move(conv);
  ssm_ = std::move(ssm);
  seq_length_ += added_tokens;
}

}  // namespace kvserve::cache
