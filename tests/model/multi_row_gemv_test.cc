// Tests of MultiRowGemv and WidenWeight against at::mm: every row count, ragged input sizes,
// float32 / bfloat16 / float16 weights, one and several threads, batch invariance, and
// refused inputs.
#include "model/multi_row_gemv.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/model/thread_count.h"

namespace kvserve::model {
namespace {

TEST(MultiRowGemvTest, EqualsMatrixProductForEveryRowCountAndWeightDtype) {
  at::manual_seed(3);
  // 37 and 53 inputs: no whole 16-element chunk in one, a partial one in the other, so the
  // scalar tails run; 5000 outputs give each thread several blocks and a partial last block.
  for (int64_t in : {37, 53, 512}) {
    const at::Tensor w32 = at::randn({5000, in});
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
      const at::Tensor w = w32.to(dtype);
      const at::Tensor widened = w.to(at::kFloat);  // the exact values the kernel multiplies
      for (int64_t rows = 1; rows <= kMultiRowGemvMaxRows; ++rows) {
        const at::Tensor x = at::randn({rows, in});
        const at::Tensor expected = at::mm(x, widened.t());
        for (int threads : {1, 2, 3}) {
          ThreadCount count(threads);
          const at::Tensor y = MultiRowGemv(x, w);
          ASSERT_EQ(y.sizes(), expected.sizes());
          // Sums of `in` products (|y| up to ~4 sqrt(in)): float32 rounding of a sequential sum
          // (the portable kernel) reaches ~1e-4 at 512 inputs, so the bound scales with in.
          EXPECT_LT((y - expected).abs().max().item<float>(), 2e-4 * std::sqrt(in / 64.0 + 1))
              << rows << " rows, in " << in << ", " << dtype << ", " << threads << " threads";
        }
      }
    }
  }
}

TEST(MultiRowGemvTest, ARowsResultDoesNotDependOnItsBatch) {
  at::manual_seed(4);
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    const at::Tensor w = at::randn({700, 133}).to(dtype);
    const at::Tensor batch = at::randn({kMultiRowGemvMaxRows, 133});
    ThreadCount count(2);
    const at::Tensor together = MultiRowGemv(batch, w);
    for (int64_t r = 0; r < kMultiRowGemvMaxRows; ++r) {
      // Bit-identical alone and in every position of smaller batches.
      EXPECT_TRUE(at::equal(MultiRowGemv(batch.narrow(0, r, 1), w), together.narrow(0, r, 1)))
          << dtype << " row " << r;
      const int64_t start = std::max<int64_t>(0, r - 2);
      const at::Tensor part = MultiRowGemv(batch.narrow(0, start, r - start + 1).contiguous(), w);
      EXPECT_TRUE(at::equal(part.narrow(0, r - start, 1), together.narrow(0, r, 1)))
          << dtype << " row " << r;
    }
  }
}

TEST(MultiRowGemvTest, WidenWeightIsExactAndReusesItsScratch) {
  at::manual_seed(5);
  const at::Tensor w32 = at::randn({300, 77});
  at::Tensor scratch;
  for (at::ScalarType dtype : {at::kBFloat16, at::kHalf, at::kFloat}) {
    const at::Tensor w = w32.to(dtype);
    ThreadCount count(2);
    const at::Tensor widened = WidenWeight(w, &scratch);
    EXPECT_EQ(widened.scalar_type(), at::kFloat);
    EXPECT_TRUE(at::equal(widened, w.to(at::kFloat))) << dtype;
  }
  const void* storage = scratch.data_ptr();
  const at::Tensor smaller = WidenWeight(w32.narrow(0, 0, 10).to(at::kBFloat16), &scratch);
  EXPECT_EQ(scratch.data_ptr(), storage);  // fits: no new buffer
  EXPECT_EQ(smaller.sizes(), (std::vector<int64_t>{10, 77}));
}

TEST(MultiRowGemvTest, RefusesWhatItDoesNotHandle) {
  const at::Tensor w = at::randn({8, 4});
  EXPECT_THROW(MultiRowGemv(at::randn({17, 4}), w), c10::Error);
  EXPECT_THROW(MultiRowGemv(at::randn({2, 5}), w), c10::Error);
  EXPECT_THROW(MultiRowGemv(at::randn({2, 4}, at::kDouble), w), c10::Error);
  EXPECT_THROW(MultiRowGemv(at::randn({4, 2}).t(), w), c10::Error);
  EXPECT_THROW(MultiRowGemv(at::randn({2, 4}), w.to(at::kDouble)), c10::Error);
  EXPECT_FALSE(IsGemvWeightDtype(at::kDouble));
  EXPECT_TRUE(IsGemvWeightDtype(at::kBFloat16));
}

}  // namespace
}  // namespace kvserve::model
