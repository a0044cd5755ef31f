// Tests for OnednnLinear: equal to at::mm for row counts around its 64-row split, input widths
// with and without whole vectors, several output widths and thread counts; it refuses what it
// does not take. Skipped where kvserve was built without oneDNN or the CPU lacks AVX-512.
#include "model/onednn_gemm.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>

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

TEST(OnednnGemmTest, RefusesWhatItDoesNotTake) {
  const at::Tensor x = at::randn({20, 8});
  const at::Tensor w = at::randn({4, 8});
  at::Tensor y;
  EXPECT_FALSE(OnednnLinear(x.to(at::kDouble), w.to(at::kDouble), &y));
  EXPECT_FALSE(OnednnLinear(x, at::randn({4, 9}), &y));       // widths differ
  EXPECT_FALSE(OnednnLinear(x.t(), at::randn({4, 20}), &y));  // rows not contiguous
  EXPECT_FALSE(OnednnLinear(x, w.to(at::kBFloat16), &y));     // widened by the caller
  EXPECT_EQ(OnednnLinear(x, w, &y), OnednnAvailable());
}

}  // namespace
}  // namespace kvserve::model
