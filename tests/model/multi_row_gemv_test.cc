// Tests of MultiRowGemv and WidenWeight against at::mm: every row count, ragged input sizes,
// float32 / bfloat16 / float16 weights, one and several threads, batch invariance, and
// refused inputs.
#include "model/multi_row_gemv.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <c10/util/BFloat16.h>

#include <cmath>
#include <limits>
#include <vector>

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

// Bf16Compute::kNative: x rounded to bfloat16, products of bfloat16 pairs (exact in float32)
// summed in float32. Compared with the same product in double, and shown to differ from the
// exact (widened-weight) product by about bfloat16's rounding of x, so the rounding did happen.
TEST(MultiRowGemvTest, Bf16NativeMultipliesActivationsRoundedToBf16) {
  if (ResolveBf16Compute(Bf16Compute::kNative) != Bf16Compute::kNative) {
    GTEST_SKIP() << "no AVX512-BF16 on this CPU (or KVSERVE_CPU_ISA caps it)";
  }
  at::manual_seed(6);
  // Around the kernel's 64- and 32-element steps and its masked tail.
  for (int64_t in : {1, 31, 32, 33, 63, 64, 65, 100, 512, 1376}) {
    const at::Tensor w = at::randn({300, in}).to(at::kBFloat16);
    const at::Tensor w64 = w.to(at::kDouble);
    for (int64_t rows : {1, 2, 3, 4, 5, 8, 13, 16}) {
      const at::Tensor x = at::randn({rows, in});
      const at::Tensor rounded = at::mm(x.to(at::kBFloat16).to(at::kDouble), w64.t());
      const at::Tensor exact = at::mm(x.to(at::kDouble), w64.t());
      for (int threads : {1, 2, 3}) {
        ThreadCount count(threads);
        const at::Tensor y = MultiRowGemv(x, w, Bf16Compute::kNative).to(at::kDouble);
        const double bound = 2e-5 * std::sqrt(static_cast<double>(in));
        EXPECT_LT((y - rounded).abs().max().item<double>(), bound)
            << rows << " rows, in " << in << ", " << threads << " threads";
        if (in >= 32) {
          EXPECT_GT((y - exact).abs().max().item<double>(), 10 * bound)
              << "x was not rounded: " << rows << " rows, in " << in;
        }
      }
      // Each row is computed alone as in any batch.
      const at::Tensor together = MultiRowGemv(x, w, Bf16Compute::kNative);
      for (int64_t r = 0; r < rows; ++r) {
        EXPECT_TRUE(at::equal(MultiRowGemv(x.narrow(0, r, 1), w, Bf16Compute::kNative),
                              together.narrow(0, r, 1)))
            << "row " << r << " of " << rows << ", in " << in;
      }
    }
  }
}

TEST(MultiRowGemvTest, RoundToBf16RoundsToNearestEven) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> values = {0.0f,
                               -0.0f,
                               1.0f,
                               -2.5f,
                               1.00390625f /* tie: down to 1 */,
                               1.01171875f /* tie: up */,
                               3.4e38f,
                               -inf,
                               inf,
                               1.2e-38f,
                               1e-40f,
                               -1e-40f,
                               std::numeric_limits<float>::quiet_NaN()};
  at::manual_seed(7);
  const at::Tensor random = at::randn({40}) * 1000;
  for (int64_t i = 0; i < random.numel(); ++i) values.push_back(random[i].item<float>());
  // Every length up to the whole list: the vector body and its masked tail.
  for (size_t n = 1; n <= values.size(); ++n) {
    std::vector<uint16_t> out(n + 1, 0xABCD);
    RoundToBf16(values.data(), out.data(), static_cast<int64_t>(n));
    for (size_t i = 0; i < n; ++i) {
      // Subnormals become zero of their sign (the instruction's behaviour).
      const float v =
          std::fpclassify(values[i]) == FP_SUBNORMAL ? std::copysign(0.0f, values[i]) : values[i];
      const c10::BFloat16 expected(v);
      if (std::isnan(values[i])) {
        EXPECT_TRUE(
            std::isnan(static_cast<float>(c10::BFloat16(out[i], c10::BFloat16::from_bits()))));
      } else {
        EXPECT_EQ(out[i], expected.x) << values[i] << " (length " << n << ")";
      }
    }
    EXPECT_EQ(out[n], 0xABCD) << "wrote past the end, length " << n;
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
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the worker pool runs threads
  // A matcher, not a regular expression (see sampler_test.cc: libonig's POSIX regex symbols).
  const auto names_it = ::testing::HasSubstr("MultiRowGemv");
  EXPECT_DEATH(MultiRowGemv(at::randn({17, 4}), w), names_it);
  EXPECT_DEATH(MultiRowGemv(at::randn({2, 5}), w), names_it);
  EXPECT_DEATH(MultiRowGemv(at::randn({2, 4}, at::kDouble), w), names_it);
  EXPECT_DEATH(MultiRowGemv(at::randn({4, 2}).t(), w), names_it);
  EXPECT_DEATH(MultiRowGemv(at::randn({2, 4}), w.to(at::kDouble)), names_it);
  EXPECT_FALSE(IsGemvWeightDtype(at::kDouble));
  EXPECT_TRUE(IsGemvWeightDtype(at::kBFloat16));
}

}  // namespace
}  // namespace kvserve::model
