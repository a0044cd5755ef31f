// Tests for HqqQuantizer: error ordering by nbits, and the half-quadratic refinement.
#include "cache/hqq_quantizer.h"

#include <gtest/gtest.h>

namespace kvserve::cache {
namespace {

double MeanAbsError(const Quantizer& q, const at::Tensor& x) {
  return (q.Quantize(x)->Dequantize() - x).abs().mean().item<double>();
}

TEST(HqqQuantizerTest, ErrorShrinksWithMoreBits) {
  at::manual_seed(4);
  const at::Tensor x = at::randn({2, 4, 32, 64});
  for (int axis : {0, 1}) {
    const double e8 = MeanAbsError(HqqQuantizer(8, axis, 64), x);
    const double e4 = MeanAbsError(HqqQuantizer(4, axis, 64), x);
    const double e3 = MeanAbsError(HqqQuantizer(3, axis, 64), x);
    const double e2 = MeanAbsError(HqqQuantizer(2, axis, 64), x);
    const double e1 = MeanAbsError(HqqQuantizer(1, axis, 64), x);
    EXPECT_LT(e8, e4) << axis;
    EXPECT_LT(e4, e3) << axis;
    EXPECT_LT(e3, e2) << axis;
    EXPECT_LT(e2, e1) << axis;
    EXPECT_LT(e8, 0.01) << axis;
  }
}

TEST(HqqQuantizerTest, HalfQuadraticIterationsDoNotIncreaseError) {
  at::manual_seed(5);
  // Heavy-tailed values are where HQQ's lp-norm refinement pays off over min/max.
  const at::Tensor x = at::randn({1, 4, 64, 64}).pow(3);
  for (int nbits : {2, 3, 4}) {
    const double plain = MeanAbsError(HqqQuantizer(nbits, 1, 64, /*iterations=*/0), x);
    const double refined = MeanAbsError(HqqQuantizer(nbits, 1, 64), x);
    EXPECT_LT(refined, plain) << nbits;
  }
}

TEST(HqqQuantizerTest, PerChannelGroupsSpanTokens) {
  const at::Tensor x = at::randn({1, 1, 6, 8});
  absl::StatusOr<QuantizedTensor> q = HqqQuantizer(4, 0, 4).Quantize(x);
  ASSERT_TRUE(q.ok());
  // ceil(6 / 4) = 2 groups per channel.
  EXPECT_EQ(q->bytes(), 6 * 4 + 2 * (2 * 8) * 4);
  EXPECT_EQ(q->Dequantize().sizes(), x.sizes());
}

}  // namespace
}  // namespace kvserve::cache
