// Tests for StaticSlidingWindowLayer: the four update cases of the reference (§2.4).
#include "cache/static_sliding_window_layer.h"

#include <gtest/gtest.h>

#include "tests/cache/test_tensors.h"

namespace kvserve::cache {
namespace {

using testing::Positions;
using testing::PositionTensor;

LayerView Update(StaticSlidingWindowLayer& layer, int64_t start, int64_t n) {
  absl::StatusOr<LayerView> view = layer.Update(PositionTensor(start, n), PositionTensor(start, n));
  EXPECT_TRUE(view.ok()) << view.status();
  return *view;
}

TEST(StaticSlidingWindowLayerTest, FillsThenRollsKeepingWindowTokens) {
  StaticSlidingWindowLayer layer(LayerType::kSlidingAttention, 4, 100);
  EXPECT_EQ(layer.MaxLength(), 4);
  LayerView v = Update(layer, 0, 2);  // not full: whole buffer
  EXPECT_EQ(v.keys.size(2), 4);
  EXPECT_EQ(v.num_valid, 2);
  EXPECT_EQ(Positions(v.keys), (std::vector<int64_t>{0, 1, 0, 0}));
  v = Update(layer, 2, 2);  // exactly full
  EXPECT_EQ(v.num_valid, 4);
  EXPECT_EQ(v.kv_offset, 0);
  v = Update(layer, 4, 1);  // full, one token: roll
  EXPECT_EQ(v.kv_offset, 1);
  EXPECT_EQ(v.num_valid, 4);
  EXPECT_EQ(Positions(v.keys), (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(layer.SeqLength(), 5);
  // Static keeps W tokens (dynamic keeps W-1).
  EXPECT_EQ(layer.Memory().device_bytes, 2 * 4 * 2 * 4 * 4);
}

TEST(StaticSlidingWindowLayerTest, BecomingFullReturnsEveryToken) {
  StaticSlidingWindowLayer layer(LayerType::kSlidingAttention, 4, 100);
  Update(layer, 0, 3);
  LayerView v = Update(layer, 3, 3);  // c=3, n=3 > E-c
  EXPECT_EQ(v.kv_offset, 0);
  EXPECT_EQ(v.num_valid, 6);
  EXPECT_EQ(Positions(v.keys), (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
  v = Update(layer, 6, 1);
  EXPECT_EQ(Positions(v.keys), (std::vector<int64_t>{3, 4, 5, 6}));
  EXPECT_EQ(v.kv_offset, 3);
}

TEST(StaticSlidingWindowLayerTest, PrefillLongerThanWindow) {
  StaticSlidingWindowLayer layer(LayerType::kSlidingAttention, 3, 100);
  LayerView v = Update(layer, 0, 7);
  EXPECT_EQ(v.num_valid, 7);
  EXPECT_EQ(v.kv_offset, 0);
  v = Update(layer, 7, 1);
  EXPECT_EQ(Positions(v.keys), (std::vector<int64_t>{5, 6, 7}));
  EXPECT_EQ(v.kv_offset, 5);
}

TEST(StaticSlidingWindowLayerTest, FullMultiTokenUpdateDropsOneStoredToken) {
  StaticSlidingWindowLayer layer(LayerType::kChunkedAttention, 4, 100);
  Update(layer, 0, 4);
  LayerView v = Update(layer, 4, 3);  // stored[1:] + new: E-1+n = 6 tokens from c-E+1 = 1
  EXPECT_EQ(v.kv_offset, 1);
  EXPECT_EQ(v.num_valid, 6);
  EXPECT_EQ(Positions(v.keys), (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  v = Update(layer, 7, 1);
  EXPECT_EQ(Positions(v.keys), (std::vector<int64_t>{4, 5, 6, 7}));
  EXPECT_EQ(layer.type(), LayerType::kChunkedAttention);
}

TEST(StaticSlidingWindowLayerTest, CapacityIsMinOfWindowAndMaxCacheLen) {
  StaticSlidingWindowLayer layer(LayerType::kSlidingAttention, 16, 5);
  EXPECT_EQ(layer.MaxLength(), 5);
  LayerView v = Update(layer, 0, 1);
  EXPECT_EQ(v.keys.size(2), 5);
}

TEST(StaticSlidingWindowLayerTest, ZeroTokenUpdateIsARead) {
  StaticSlidingWindowLayer layer(LayerType::kSlidingAttention, 3, 100);
  Update(layer, 0, 5);
  LayerView v = Update(layer, 5, 0);
  EXPECT_EQ(Positions(v.keys), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(v.kv_offset, 2);
  EXPECT_EQ(layer.SeqLength(), 5);
}

TEST(StaticSlidingWindowLayerTest, CropOnlyBeforeTokensAreDropped) {
  StaticSlidingWindowLayer layer(LayerType::kSlidingAttention, 4, 100);
  Update(layer, 0, 4);
  ASSERT_TRUE(layer.Crop(-1).ok());
  EXPECT_EQ(layer.SeqLength(), 3);
  LayerView v = Update(layer, 3, 1);
  EXPECT_EQ(Positions(v.keys), (std::vector<int64_t>{0, 1, 2, 3}));
  Update(layer, 4, 1);
  absl::Status s = layer.Crop(-1);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(layer.SeqLength(), 5);
}

TEST(StaticSlidingWindowLayerTest, BeamHelpersAndClone) {
  StaticSlidingWindowLayer layer(LayerType::kSlidingAttention, 3, 100);
  ASSERT_TRUE(layer.Update(PositionTensor(0, 4, 2), PositionTensor(0, 4, 2)).ok());
  ASSERT_TRUE(layer.Reorder(at::tensor({1, 1}, at::kLong)).ok());
  std::unique_ptr<CacheLayer> copy = layer.Clone();
  ASSERT_TRUE(layer.RepeatInterleave(2).ok());
  EXPECT_EQ(layer.BatchSize(), 4);
  EXPECT_EQ(copy->BatchSize(), 2);
  absl::StatusOr<LayerView> v = copy->Update(PositionTensor(4, 1, 2), PositionTensor(4, 1, 2));
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->keys[0][0][0][0].item<float>(), 1002);
  layer.Reset();
  EXPECT_EQ(layer.Memory(), MemoryUsage{});
}

}  // namespace
}  // namespace kvserve::cache
