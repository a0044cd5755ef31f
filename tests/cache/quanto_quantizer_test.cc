// Tests for QuantoQuantizer: round-trip error bounds and grouping.
#include "cache/quanto_quantizer.h"

#include <gtest/gtest.h>

namespace kvserve::cache {
namespace {

double MeanAbsError(const Quantizer& q, const at::Tensor& x) {
  return (q.Quantize(x)->Dequantize() - x).abs().mean().item<double>();
}

TEST(QuantoQuantizerTest, ErrorWithinHalfAStepPerGroup) {
  at::manual_seed(2);
  const at::Tensor x = at::randn({2, 4, 32, 64});
  for (int nbits : {2, 4}) {
    // Per-token groups of 16 channels: each group's step is (max - min) / (2^n - 1).
    const at::Tensor deq = QuantoQuantizer(nbits, 0, 16).Quantize(x)->Dequantize();
    const at::Tensor g = x.reshape({2, 4, 32, 4, 16});
    const at::Tensor step = (g.amax(4, true) - g.amin(4, true)) / ((1 << nbits) - 1);
    const at::Tensor err = (deq - x).abs().reshape({2, 4, 32, 4, 16});
    EXPECT_TRUE((err <= step / 2 + 1e-5).all().item<bool>()) << nbits;
  }
}

TEST(QuantoQuantizerTest, Int4BeatsInt2OnBothAxes) {
  at::manual_seed(3);
  const at::Tensor x = at::randn({1, 4, 64, 64});
  for (int axis : {0, -1}) {
    const double e4 = MeanAbsError(QuantoQuantizer(4, axis, 32), x);
    const double e2 = MeanAbsError(QuantoQuantizer(2, axis, 32), x);
    EXPECT_LT(e4, e2) << axis;
    EXPECT_LT(e4, 0.1) << axis;  // step ~ 6 sigma / 15, mean error ~ step / 4
  }
}

TEST(QuantoQuantizerTest, ConstantGroupsAreExact) {
  const at::Tensor x = at::full({1, 1, 3, 8}, 1.5);
  EXPECT_TRUE(at::equal(QuantoQuantizer(2, 0, 8).Quantize(x)->Dequantize(), x));
}

TEST(QuantoQuantizerTest, PerTokenGroupCapsAtHeadDimAndMustDivideIt) {
  // The default group of 64 on head_dim 16 quantizes each token row as one group.
  absl::StatusOr<QuantizedTensor> q = QuantoQuantizer(4, 0, 64).Quantize(at::randn({1, 1, 2, 16}));
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->bytes(), 2 * 8 + 2 * 2 * 4);
  absl::StatusOr<QuantizedTensor> bad = QuantoQuantizer(4, 0, 6).Quantize(at::randn({1, 1, 2, 16}));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("q_group_size 6"), std::string::npos);
}

TEST(QuantoQuantizerTest, KeepsDtype) {
  const at::Tensor x = at::randn({1, 2, 4, 16}).to(at::kDouble);
  EXPECT_EQ(QuantoQuantizer(4, -1, 2).Quantize(x)->Dequantize().scalar_type(), at::kDouble);
}

}  // namespace
}  // namespace kvserve::cache
