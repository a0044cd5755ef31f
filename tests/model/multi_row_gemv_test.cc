// Tests of MultiRowGemv against at::mm: every row count, ragged input sizes, one and several
// threads, and refused inputs.
#include "model/multi_row_gemv.h"

#include <gtest/gtest.h>

namespace kvserve::model {
namespace {

TEST(MultiRowGemvTest, EqualsMatrixProductForEveryRowCount) {
  at::manual_seed(3);
  // 37 inputs: neither 4 nor 8 divides them, so the scalar tails run; 5000 outputs give each
  // thread several blocks and a partial last block.
  const at::Tensor w = at::randn({5000, 37});
  for (int64_t rows = 1; rows <= kMultiRowGemvMaxRows; ++rows) {
    const at::Tensor x = at::randn({rows, 37});
    const at::Tensor expected = at::mm(x, w.t());
    for (int threads : {1, 2, 3}) {
      const at::Tensor y = MultiRowGemv(x, w, threads);
      ASSERT_EQ(y.sizes(), expected.sizes());
      EXPECT_LT((y - expected).abs().max().item<float>(), 1e-4) << rows << " rows";
    }
  }
}

TEST(MultiRowGemvTest, RefusesWhatItDoesNotHandle) {
  const at::Tensor w = at::randn({8, 4});
  EXPECT_THROW(MultiRowGemv(at::randn({17, 4}), w, 1), c10::Error);
  EXPECT_THROW(MultiRowGemv(at::randn({2, 5}), w, 1), c10::Error);
  EXPECT_THROW(MultiRowGemv(at::randn({2, 4}, at::kDouble), w, 1), c10::Error);
  EXPECT_THROW(MultiRowGemv(at::randn({4, 2}).t(), w, 1), c10::Error);
}

}  // namespace
}  // namespace kvserve::model
