// Half-quadratic quantization (see hqq_quantizer.h).
#include "cache/hqq_quantizer.h"

#include <limits>

namespace kvserve::cache {
namespace {

// Generalized soft-thresholding for the lp "norm" with p < 1 (hqq's shrink_lp_op).
at::Tensor ShrinkLp(const at::Tensor& x, double beta, double p) {
  const at::Tensor ax = x.abs();
  return at::sign(x) * at::relu(ax - (1.0 / beta) * at::pow(ax, p - 1.0));
}

}  // namespace

HqqQuantizer::HqqQuantizer(int nbits, int axis, int64_t group, int iterations)
    : nbits_(nbits),
      axis_(axis == 1 ? GroupAxis::kPerToken : GroupAxis::kPerChannel),
      group_(group),
      iterations_(iterations) {}

absl::StatusOr<QuantizedTensor> HqqQuantizer::Quantize(const at::Tensor& x) const {
  absl::StatusOr<int64_t> group = EffectiveGroup(axis_, group_, x.size(3));
  if (!group.ok()) return group.status();
  const double qmax = static_cast<double>((1 << nbits_) - 1);
  const at::Tensor w = GroupView(x.to(at::kFloat), axis_, *group);
  const int64_t dim = GroupReduceDim(axis_);
  const at::Tensor lo = w.amin(dim, /*keepdim=*/true);
  const at::Tensor hi = w.amax(dim, /*keepdim=*/true);
  // hqq's parameters: q = round(w * scale + zero), w ~ (q - zero) / scale.
  const at::Tensor scale = (qmax / (hi - lo)).clamp_max(2e4);
  at::Tensor zero = -lo * scale;

  constexpr double kLpNorm = 0.7;
  constexpr double kKappa = 1.01;
  double beta = 10.0;
  double best_error = std::numeric_limits<double>::infinity();
  at::Tensor best_zero = zero;
  for (int i = 0; i < iterations_ && w.numel() > 0; ++i) {
    const at::Tensor zero_used = zero;
    const at::Tensor q = at::round(w * scale + zero).clamp(0, qmax);
    const at::Tensor w_r = (q - zero) / scale;
    const at::Tensor w_e = ShrinkLp(w - w_r, beta, kLpNorm);
    zero = at::mean(q - (w - w_e) * scale, dim, /*keepdim=*/true);
    beta *= kKappa;
    const double error = (w - w_r).abs().mean().item<double>();
    if (error >= best_error) break;
    best_error = error;
    best_zero = zero_used;
  }
  // Keeps the zero-point whose reconstruction was measured best (hqq returns the one
  // updated after it, which is never evaluated).
  const at::Tensor codes = at::round(w * scale + best_zero).clamp(0, qmax);
  return QuantizedTensor::FromCodes(UngroupView(codes, axis_, x.size(2)), 1.0 / scale, best_zero,
                                    nbits_, axis_, *group, x.scalar_type());
}

}  // namespace kvserve::cache
