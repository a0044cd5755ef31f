// Quantizer: turns a K/V tensor into a QuantizedTensor (one backend per implementation).
#pragma once

#include <ATen/ATen.h>

#include "absl/status/statusor.h"
#include "cache/quantized_tensor.h"

namespace kvserve::cache {

// Stateless and thread-compatible; one per key/value side of a QuantizedLayer.
class Quantizer {
 public:
  virtual ~Quantizer() = default;
  // Quantizes x [batch, heads, seq, head_dim] (floating point). InvalidArgument when the
  // shape does not fit the grouping (head_dim not a multiple of the per-token group).
  virtual absl::StatusOr<QuantizedTensor> Quantize(const at::Tensor& x) const = 0;
  virtual int nbits() const = 0;
};

// The group used along `axis` for a head_dim: per-token groups are capped at head_dim
// (a group never spans tokens, so that tokens can be cropped one by one); InvalidArgument
// naming q_group_size when head_dim is not a multiple of it.
absl::StatusOr<int64_t> EffectiveGroup(GroupAxis axis, int64_t q_group_size, int64_t head_dim);

}  // namespace kvserve::cache
