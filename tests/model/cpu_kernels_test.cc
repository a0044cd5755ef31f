// Tests of the fused CPU kernels against the ATen expressions they replace: attention over
// every layer kind with offsets, unused slots and strided inputs; the half rotation; SiLU
// times up; and the inputs they leave to ATen.
#include "model/cpu_kernels.h"

#include <gtest/gtest.h>

#include <limits>

#include "cache/torch_compat.h"
#include "model/attention.h"

namespace kvserve::model {
namespace {

using cache::LayerSpec;
using cache::LayerType;
using cache::LayerView;

float MaxDiff(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<float>();
}

struct AttendCase {
  const char* name;
  LayerSpec layer;
  int64_t n;        // queries
  int64_t kv_len;   // slots in the view
  int64_t offset;   // absolute position of slot 0
  int64_t valid;    // slots holding tokens
  int64_t q_start;  // absolute position of the first query
};

TEST(FusedAttendTest, EqualsAttendForEveryLayerKind) {
  at::manual_seed(11);
  const LayerSpec full{LayerType::kFullAttention, 0};
  const LayerSpec sliding{LayerType::kSlidingAttention, 5};
  const LayerSpec chunked{LayerType::kChunkedAttention, 4};
  const AttendCase cases[] = {
      {"decode, full", full, 1, 20, 0, 20, 19},
      {"several queries, full", full, 4, 12, 0, 12, 8},
      {"static slots unused", full, 1, 32, 0, 9, 8},
      {"sliding window, offset view", sliding, 1, 4, 16, 4, 20},
      {"sliding, several queries", sliding, 3, 12, 0, 12, 9},
      {"chunked", chunked, 2, 14, 0, 14, 12},
      {"nothing visible", full, 1, 6, 10, 0, 3},
  };
  for (int threads : {1, 2}) {
    compat::SetNumThreads(threads);
    for (const AttendCase& c : cases) {
      // 8 query heads over 2 kv heads; queries strided like the forward's view of qkv.
      const at::Tensor qkv = at::randn({c.n, 8 * 16 + 64});
      const at::Tensor q = qkv.narrow(1, 0, 8 * 16).view({c.n, 8, 16});
      LayerView view{at::randn({1, 2, c.kv_len, 16}), at::randn({1, 2, c.kv_len, 16}), c.offset,
                     c.valid};
      at::Tensor fused;
      ASSERT_TRUE(FusedAttend(q, view, c.q_start, c.layer, 0.25, &fused)) << c.name;
      const at::Tensor expected = Attend(q, view, c.q_start, c.layer, 0.25);
      ASSERT_EQ(fused.sizes(), expected.sizes()) << c.name;
      EXPECT_LT(MaxDiff(fused, expected), 1e-5) << c.name << ", " << threads << " threads";
    }
  }
  compat::SetNumThreads(1);
}

TEST(FusedAttendTest, LeavesOtherInputsToAten) {
  const LayerSpec full{LayerType::kFullAttention, 0};
  LayerView view{at::randn({1, 2, 4, 16}), at::randn({1, 2, 4, 16}), 0, 4};
  at::Tensor out;
  EXPECT_FALSE(FusedAttend(at::randn({1, 8, 16}, at::kDouble), view, 3, full, 0.25, &out));
  EXPECT_FALSE(FusedAttend(at::randn({1, 16, 8}).transpose(1, 2), view, 3, full, 0.25, &out));
  LayerView half{view.keys.to(at::kHalf), view.values.to(at::kHalf), 0, 4};
  EXPECT_FALSE(FusedAttend(at::randn({1, 8, 16}), half, 3, full, 0.25, &out));
  EXPECT_FALSE(FusedAttend(at::randn({1, 7, 16}), view, 3, full, 0.25, &out));  // 7 % 2 != 0
  EXPECT_FALSE(out.defined());
}

TEST(FusedRotateHalfTest, EqualsTheAtenRotation) {
  at::manual_seed(12);
  for (int64_t rot : {16, 8}) {  // whole head and partial rotary
    const at::Tensor qkv = at::randn({5, 4 * 16 + 8});
    at::Tensor x = qkv.narrow(1, 0, 4 * 16).view({5, 4, 16});
    const at::Tensor cos = at::randn({5, rot});
    const at::Tensor sin = at::randn({5, rot});
    at::Tensor expected = x.clone();
    {
      at::Tensor r = expected.narrow(-1, 0, rot);
      const at::Tensor rotated =
          at::cat({r.narrow(-1, rot / 2, rot / 2).neg(), r.narrow(-1, 0, rot / 2)}, -1);
      r.copy_(r * cos.unsqueeze(1) + rotated * sin.unsqueeze(1));
    }
    ASSERT_TRUE(FusedRotateHalf(x, cos, sin, rot));
    EXPECT_LT(MaxDiff(x, expected), 1e-5) << rot;
    // In place through the view: the parent tensor changed, its other columns did not.
    EXPECT_TRUE(at::equal(qkv.narrow(1, 0, 64).view({5, 4, 16}), x));
  }
  at::Tensor bad = at::randn({2, 4, 16}, at::kDouble);
  EXPECT_FALSE(FusedRotateHalf(bad, at::randn({2, 16}), at::randn({2, 16}), 16));
  at::Tensor x = at::randn({2, 4, 16});
  EXPECT_FALSE(FusedRotateHalf(x, at::randn({3, 16}), at::randn({3, 16}), 16));  // tokens
  EXPECT_FALSE(FusedRotateHalf(x, at::randn({2, 15}), at::randn({2, 15}), 15));  // odd
}

TEST(FusedSiluMulTest, EqualsSiluTimesUp) {
  at::manual_seed(13);
  const at::Tensor gate_up = at::randn({3, 2 * 37}) * 4;
  const at::Tensor expected = at::silu(gate_up.narrow(1, 0, 37)) * gate_up.narrow(1, 37, 37);
  const at::Tensor fused = FusedSiluMul(gate_up, 37);
  ASSERT_TRUE(fused.defined());
  EXPECT_LT(MaxDiff(fused, expected), 1e-5);
  EXPECT_FALSE(FusedSiluMul(gate_up, 36).defined());
  // Many rows (a prefill) take ATen's kernels on row slices over the worker threads.
  const at::Tensor many = at::randn({300, 2 * 37}) * 4;
  for (int threads : {1, 2}) {
    compat::SetNumThreads(threads);
    const at::Tensor parallel = FusedSiluMul(many, 37);
    ASSERT_TRUE(parallel.defined());
    EXPECT_TRUE(at::equal(parallel, at::silu(many.narrow(1, 0, 37)) * many.narrow(1, 37, 37)));
  }
  compat::SetNumThreads(1);
  EXPECT_FALSE(FusedSiluMul(gate_up.to(at::kDouble), 37).defined());
}

TEST(ParallelSoftmaxTest, EqualsSoftmaxWithMaskedColumns) {
  at::manual_seed(14);
  at::Tensor scores = at::randn({4, 300, 64}) * 3;
  scores.narrow(2, 40, 24).fill_(-std::numeric_limits<float>::infinity());
  for (int threads : {1, 2, 3}) {
    compat::SetNumThreads(threads);
    const at::Tensor probs = ParallelSoftmax(scores);
    ASSERT_TRUE(probs.defined());
    EXPECT_TRUE(at::equal(probs, at::softmax(scores, -1))) << threads;
  }
  compat::SetNumThreads(1);
  EXPECT_FALSE(ParallelSoftmax(scores.transpose(0, 2)).defined());
  EXPECT_FALSE(ParallelSoftmax(scores.to(at::kDouble)).defined());
}

}  // namespace
}  // namespace kvserve::model
