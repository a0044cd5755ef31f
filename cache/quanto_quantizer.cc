// Min/max affine quantization (see quanto_quantizer.h).
#include "cache/quanto_quantizer.h"

#include "absl/strings/str_cat.h"

namespace kvserve::cache {

absl::StatusOr<int64_t> EffectiveGroup(GroupAxis axis, int64_t q_group_size, int64_t head_dim) {
  if (axis == GroupAxis::kPerChannel) return q_group_size;
  const int64_t group = std::min(q_group_size, head_dim);
  if (head_dim % group != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cache_config.q_group_size ", q_group_size, " does not divide head_dim ", head_dim,
        "; allowed for per-token grouping: a divisor of head_dim, or >= head_dim"));
  }
  return group;
}

QuantoQuantizer::QuantoQuantizer(int nbits, int axis, int64_t group)
    : nbits_(nbits),
      axis_(axis == 0 ? GroupAxis::kPerToken : GroupAxis::kPerChannel),
      group_(group) {}

absl::StatusOr<QuantizedTensor> QuantoQuantizer::Quantize(const at::Tensor& x) const {
  absl::StatusOr<int64_t> group = EffectiveGroup(axis_, group_, x.size(3));
  if (!group.ok()) return group.status();
  const double qmax = static_cast<double>((1 << nbits_) - 1);
  const at::Tensor grouped = GroupView(x.to(at::kFloat), axis_, *group);
  const int64_t dim = GroupReduceDim(axis_);
  const at::Tensor lo = grouped.amin(dim, /*keepdim=*/true);
  const at::Tensor hi = grouped.amax(dim, /*keepdim=*/true);
  at::Tensor scale = (hi - lo) / qmax;
  // A constant group gets scale 1: every code is 0 and dequantizes to exactly `lo`.
  scale = at::where(scale > 0, scale, at::ones_like(scale));
  const at::Tensor zero = -lo / scale;
  const at::Tensor codes = at::round(grouped / scale + zero).clamp(0, qmax);
  return QuantizedTensor::FromCodes(UngroupView(codes, axis_, x.size(2)), scale, zero, nbits_,
                                    axis_, *group, x.scalar_type());
}

}  // namespace kvserve::cache
