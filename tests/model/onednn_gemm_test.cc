// Tests for OnednnLinear: equal to at::mm for row counts around its 64-row split, input widths
// with and without whole vectors, several output widths and thread counts; it refuses what it
// does not take. Skipped where kvserve was built without oneDNN or the CPU lacks AVX-512.
#include "model/onednn_gemm.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>

#include "model/multi_row_gemv.h"
#include "tests/model/thread_count.h"

namespace kvserve::model {
namespace {

TEST(OnednnGemmTest, EqualsMatrixProduct) {
  if (!OnednnAvailable()) GTEST_SKIP() << "built without oneDNN, or no AVX-512 on this CPU";
  at::manual_seed(11);
  for (int64_t in : {37, 512}) {
    for (int64_t out : {5, 1024}) {
      const at::Tensor w = at::randn({out, in});
      for (int64_t rows : {1, 17, 63, 64, 65, 130, 512}) {
        const at::Tensor x = at::randn({rows, in});
        const at::Tensor expected = at::mm(x, w.t());
        for (int threads : {1, 2, 3}) {
          ThreadCount count(threads);
          at::Tensor y;
          ASSERT_TRUE(OnednnLinear(x, w, &y));
          ASSERT_EQ(y.sizes(), expected.sizes());
          EXPECT_LT((y - expected).abs().max().item<float>(), 2e-4 * std::sqrt(in / 64.0 + 1))
              << rows << " rows, " << in << " in, " << out << " out, " << threads << " threads";
        }
      }
    }
  }
}

// bfloat16 weights as they are: x rounded to bfloat16, oneDNN's bf16 kernels summing in
// float32. Equal to the product of the rounded inputs in double; different from the exact one.
TEST(OnednnGemmTest, Bf16WeightsMultiplyActivationsRoundedToBf16) {
  if (!OnednnAvailable() || ResolveBf16Compute(Bf16Compute::kNative) != Bf16Compute::kNative) {
    GTEST_SKIP() << "built without oneDNN, or no AVX512-BF16 on this CPU";
  }
  at::manual_seed(12);
  for (int64_t in : {37, 512}) {
    for (int64_t out : {5, 1024}) {
      const at::Tensor w = at::randn({out, in}).to(at::kBFloat16);
      const at::Tensor w64 = w.to(at::kDouble);
      for (int64_t rows : {17, 63, 64, 65, 130, 512}) {
        const at::Tensor x = at::randn({rows, in});
        const at::Tensor rounded = at::mm(x.to(at::kBFloat16).to(at::kDouble), w64.t());
        const at::Tensor exact = at::mm(x.to(at::kDouble), w64.t());
        for (int threads : {1, 2, 3}) {
          ThreadCount count(threads);
          at::Tensor y;
          ASSERT_TRUE(OnednnLinear(x, w, &y));
          ASSERT_EQ(y.scalar_type(), at::kFloat);
          ASSERT_EQ(y.sizes(), rounded.sizes());
          const double bound = 2e-5 * std::sqrt(static_cast<double>(in));
          const at::Tensor y64 = y.to(at::kDouble);
          EXPECT_LT((y64 - rounded).abs().max().item<double>(), bound)
              << rows << " rows, " << in << " in, " << out << " out, " << threads << " threads";
          EXPECT_GT((y64 - exact).abs().max().item<double>(), 10 * bound) << "x not rounded";
        }
      }
    }
  }
}

TEST(OnednnGemmTest, RefusesWhatItDoesNotTake) {
  const at::Tensor x = at::randn({20, 8});
  const at::Tensor w = at::randn({4, 8});
  at::Tensor y;
  EXPECT_FALSE(OnednnLinear(x.to(at::kDouble), w.to(at::kDouble), &y));
  EXPECT_FALSE(OnednnLinear(x, at::randn({4, 9}), &y));       // widths differ
  EXPECT_FALSE(OnednnLinear(x.t(), at::randn({4, 20}), &y));  // rows not contiguous
  // bfloat16 weights only with AVX512-BF16 (Bf16Compute::kNative); elsewhere the caller widens.
  EXPECT_EQ(OnednnLinear(x, w.to(at::kBFloat16), &y),
            OnednnAvailable() && ResolveBf16Compute(Bf16Compute::kNative) == Bf16Compute::kNative);
  EXPECT_FALSE(OnednnLinear(x, w.to(at::kHalf), &y));  // widened by the caller
  EXPECT_EQ(OnednnLinear(x, w, &y), OnednnAvailable());
}

}  // namespace
}  // namespace kvserve::model
