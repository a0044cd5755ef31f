// MambaStateLayer: one Mamba (selective state-space) layer's cache: its convolution and SSM states.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>

#include "cache/cache_layer.h"

namespace kvserve::cache {

// A Mamba layer keeps no keys/values: its cache is the last conv_kernel - 1 inputs of its
// causal depthwise convolution and the state of its selective scan, both of a fixed size
// whatever the number of tokens seen. The states summarise every token, so they cannot be
// cropped back to an earlier length: Crop(n < 0) is refused, which makes sessions recompute
// instead of cropping and prefix reuse exact-boundary only. Update (keys/values) is refused.
// The model replaces the states after each forward (SetStates), never writes into them, so a
// shallow copy is a valid rollback point. Not thread-safe: only the engine thread touches it.
class MambaStateLayer final : public CacheLayer {
 public:
  MambaStateLayer() = default;

  // Refused: a Mamba layer has no keys/values (FailedPrecondition).
  absl::StatusOr<LayerView> Update(const at::Tensor& keys, const at::Tensor& values) override;
  int64_t SeqLength() const override { return seq_length_; }
  int64_t MaxLength() const override { return -1; }
  int64_t BatchSize() const override { return conv_.defined() ? conv_.size(0) : 0; }
  // n == 0 and a legacy absolute target n >= SeqLength() are no-ops; anything that would drop
  // tokens is FailedPrecondition (the state cannot be rolled back).
  absl::Status Crop(int64_t n) override;
  absl::Status CheckCrop(int64_t n) const override;
  absl::Status Reorder(const at::Tensor& beam_idx) override;
  absl::Status SelectIndices(const at::Tensor& indices) override;
  absl::Status RepeatInterleave(int64_t repeats) override;
  MemoryUsage Memory() const override;
  std::unique_ptr<CacheLayer> Clone() const override;
  void Reset() override;
  LayerType type() const override { return LayerType::kMambaState; }
  std::unique_ptr<CacheLayer> RollbackPoint() const override;
  void RestoreRollbackPoint(std::unique_ptr<CacheLayer> point) override;
  bool ForEachTensor(const std::function<void(at::Tensor&)>& fn) override;

  // The states after SeqLength() tokens: conv [batch, d_inner, conv_kernel - 1] (the latest
  // inputs last), ssm [batch, d_inner, state_size]; undefined before the first SetStates.
  // Readers must not write through them.
  const at::Tensor& conv_state() const { return conv_; }
  const at::Tensor& ssm_state() const { return ssm_; }
  // Replaces both states with the ones after `added_tokens` more tokens. The layer keeps the
  // tensors (callers hand over new ones, never views of the old ones they then change).
  void SetStates(at::Tensor conv, at::Tensor ssm, int64_t added_tokens);

 private:
  at::Tensor conv_;  // [batch, d_inner, conv_kernel - 1]
  at::Tensor ssm_;   // [batch, d_inner, state_size]
  int64_t seq_length_ = 0;
};

}  // namespace kvserve::cache
