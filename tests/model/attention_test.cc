// Tests for Attend/VisibilityMask: exact masks for full, sliding and chunked layers, unused
// static slots, and grouped-query head mapping.
#include "model/attention.h"

#include <gtest/gtest.h>

namespace kvserve::model {
namespace {

using cache::LayerSpec;
using cache::LayerType;
using cache::LayerView;

LayerView ViewOf(int64_t kv_len, int64_t kv_offset, int64_t num_valid) {
  at::Tensor k = at::zeros({1, 1, kv_len, 2});
  return LayerView{k, k, kv_offset, num_valid};
}

std::vector<std::vector<int>> ToRows(const at::Tensor& mask) {
  std::vector<std::vector<int>> rows;
  for (int64_t i = 0; i < mask.size(0); ++i) {
    rows.emplace_back();
    for (int64_t j = 0; j < mask.size(1); ++j) rows.back().push_back(mask[i][j].item<bool>());
  }
  return rows;
}

TEST(AttentionMaskTest, FullAttentionIsCausal) {
  const auto m = VisibilityMask(3, 2, ViewOf(5, 0, 5), {LayerType::kFullAttention, 0}, at::kCPU);
  EXPECT_EQ(ToRows(m),
            (std::vector<std::vector<int>>{{1, 1, 1, 0, 0}, {1, 1, 1, 1, 0}, {1, 1, 1, 1, 1}}));
}

TEST(AttentionMaskTest, SlidingWindowSeesItselfAndWindowMinusOne) {
  // Window 3: a query at position p sees keys p-2 .. p.
  const auto m = VisibilityMask(2, 4, ViewOf(6, 0, 6), {LayerType::kSlidingAttention, 3}, at::kCPU);
  EXPECT_EQ(ToRows(m), (std::vector<std::vector<int>>{{0, 0, 1, 1, 1, 0}, {0, 0, 0, 1, 1, 1}}));
}

TEST(AttentionMaskTest, ChunkedSeesOnlyItsChunk) {
  // Chunk 4: positions 0-3 and 4-7 are separate chunks.
  const auto m = VisibilityMask(3, 3, ViewOf(6, 0, 6), {LayerType::kChunkedAttention, 4}, at::kCPU);
  EXPECT_EQ(ToRows(m), (std::vector<std::vector<int>>{
                           {1, 1, 1, 1, 0, 0}, {0, 0, 0, 0, 1, 0}, {0, 0, 0, 0, 1, 1}}));
}

TEST(AttentionMaskTest, OffsetsAndUnusedSlots) {
  // Columns hold positions 10.. and only 3 of 5 slots are filled (a static buffer).
  const auto m = VisibilityMask(1, 12, ViewOf(5, 10, 3), {LayerType::kFullAttention, 0}, at::kCPU);
  EXPECT_EQ(ToRows(m), (std::vector<std::vector<int>>{{1, 1, 1, 0, 0}}));
}

TEST(AttendTest, GroupedQueryHeadsReadTheirKvHead) {
  // 4 query heads over 2 kv heads: heads 0,1 read kv head 0; heads 2,3 read kv head 1.
  at::Tensor keys = at::zeros({1, 2, 1, 2});
  at::Tensor values = at::zeros({1, 2, 1, 2});
  values[0][0][0] = at::tensor({1.0f, 2.0f});
  values[0][1][0] = at::tensor({3.0f, 4.0f});
  LayerView view{keys, values, 0, 1};
  const at::Tensor q = at::randn({1, 4, 2});
  const at::Tensor out = Attend(q, view, 0, {LayerType::kFullAttention, 0}, 1.0);
  ASSERT_EQ(out.sizes(), (std::vector<int64_t>{1, 8}));
  const std::vector<float> expected = {1, 2, 1, 2, 3, 4, 3, 4};
  for (int i = 0; i < 8; ++i) EXPECT_FLOAT_EQ(out[0][i].item<float>(), expected[i]);
}

TEST(AttendTest, MaskedSlotsDoNotContribute) {
  // Two valid keys with equal scores and a third, unused slot holding a huge value.
  at::Tensor keys = at::zeros({1, 1, 3, 2});
  at::Tensor values = at::zeros({1, 1, 3, 2});
  values[0][0][0] = at::tensor({2.0f, 0.0f});
  values[0][0][1] = at::tensor({4.0f, 0.0f});
  values[0][0][2] = at::tensor({1e6f, 1e6f});
  const at::Tensor out =
      Attend(at::ones({1, 1, 2}), {keys, values, 0, 2}, 1, {LayerType::kFullAttention, 0}, 1.0);
  EXPECT_FLOAT_EQ(out[0][0].item<float>(), 3.0f);
  EXPECT_FLOAT_EQ(out[0][1].item<float>(), 0.0f);
}

}  // namespace
}  // namespace kvserve::model
