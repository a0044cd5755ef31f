// QuantoQuantizer: optimum-quanto style affine min/max quantization to int2/int4.
#pragma once

#include "cache/quantizer.h"

namespace kvserve::cache {

// Affine quantization with a max optimizer (scale and zero from each group's min and max):
// scale = (max - min) / (2^nbits - 1), zero = -min / scale, q = round(x / scale + zero).
// `axis` as the reference's quanto backend: 0 groups `group` channels of one token, -1
// groups `group` tokens of one channel (the reference groups the flattened tensor; kvserve
// keeps groups inside one batch row and head, see GroupAxis).
class QuantoQuantizer final : public Quantizer {
 public:
  // nbits 2 or 4, axis 0 or -1, group > 0 (validated by CacheSpec::Parse).
  QuantoQuantizer(int nbits, int axis, int64_t group);

  absl::StatusOr<QuantizedTensor> Quantize(const at::Tensor& x) const override;
  int nbits() const override { return nbits_; }

 private:
  int nbits_;
  GroupAxis axis_;
  int64_t group_;
};

}  // namespace kvserve::cache
