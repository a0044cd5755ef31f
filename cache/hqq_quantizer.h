// HqqQuantizer: half-quadratic quantization (HQQ) to 1, 2, 3, 4 or 8 bits.
#pragma once

#include "cache/quantizer.h"

namespace kvserve::cache {

// Starts from min/max affine parameters and refines the zero-point with HQQ's half-quadratic
// proximal iterations (an lp-norm, p = 0.7, shrinkage of the error; beta grows by kappa
// each step; stops when the mean error stops decreasing), as hqq's optimize_weights_proximal.
// `axis` as the reference's hqq backend: 1 groups `group` channels of one token, 0 groups
// `group` tokens of one channel (kept inside one batch row and head, see GroupAxis).
class HqqQuantizer final : public Quantizer {
 public:
  static constexpr int kDefaultIterations = 20;

  // nbits 1, 2, 3, 4 or 8, axis 0 or 1, group > 0 (validated by CacheSpec::Parse).
  HqqQuantizer(int nbits, int axis, int64_t group, int iterations = kDefaultIterations);

  absl::StatusOr<QuantizedTensor> Quantize(const at::Tensor& x) const override;
  int nbits() const override { return nbits_; }

 private:
  int nbits_;
  GroupAxis axis_;
  int64_t group_;
  int iterations_;
};

}  // namespace kvserve::cache
