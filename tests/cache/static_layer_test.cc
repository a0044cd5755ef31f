// Tests for StaticLayer: preallocation, returned views, overflow as a status, crop, beams.
#include "cache/static_layer.h"

#include <gtest/gtest.h>

#include "tests/cache/test_tensors.h"

namespace kvserve::cache {
namespace {

using testing::Positions;
using testing::PositionTensor;

TEST(StaticLayerTest, AllocatesLazilyAndReturnsWholeBuffer) {
  StaticLayer layer(8);
  EXPECT_EQ(layer.Memory(), MemoryUsage{});
  EXPECT_EQ(layer.BatchSize(), 0);
  absl::StatusOr<LayerView> view = layer.Update(PositionTensor(0, 3), PositionTensor(0, 3));
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->keys.size(2), 8);
  EXPECT_EQ(view->kv_offset, 0);
  EXPECT_EQ(view->num_valid, 3);
  EXPECT_EQ(Positions(view->keys), (std::vector<int64_t>{0, 1, 2, 0, 0, 0, 0, 0}));
  // 2 tensors of [1, 2, 8, 4] floats.
  EXPECT_EQ(layer.Memory(), MemoryUsage{.device_bytes = 2 * 8 * 8 * 4});
  EXPECT_EQ(layer.SeqLength(), 3);
  EXPECT_EQ(layer.MaxLength(), 8);

  view = layer.Update(PositionTensor(3, 1), PositionTensor(3, 1));
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->num_valid, 4);
  EXPECT_EQ(Positions(view->values), (std::vector<int64_t>{0, 1, 2, 3, 0, 0, 0, 0}));
}

TEST(StaticLayerTest, OverflowIsOutOfRangeAndLeavesLayerUnchanged) {
  StaticLayer layer(4);
  ASSERT_TRUE(layer.Update(PositionTensor(0, 3), PositionTensor(0, 3)).ok());
  absl::StatusOr<LayerView> view = layer.Update(PositionTensor(3, 2), PositionTensor(3, 2));
  EXPECT_EQ(view.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(view.status().message().find("max_cache_len >= 5"), std::string::npos);
  EXPECT_EQ(layer.SeqLength(), 3);
  ASSERT_TRUE(layer.Update(PositionTensor(3, 1), PositionTensor(3, 1)).ok());
  EXPECT_FALSE(layer.Update(PositionTensor(4, 1), PositionTensor(4, 1)).ok());
  // A first update larger than the buffer allocates nothing.
  StaticLayer small(2);
  EXPECT_FALSE(small.Update(PositionTensor(0, 3), PositionTensor(0, 3)).ok());
  EXPECT_EQ(small.Memory(), MemoryUsage{});
}

TEST(StaticLayerTest, RejectsMismatchedShapes) {
  StaticLayer layer(8);
  ASSERT_TRUE(layer.Update(PositionTensor(0, 2), PositionTensor(0, 2)).ok());
  EXPECT_EQ(layer.Update(PositionTensor(2, 1, 1, 3), PositionTensor(2, 1, 1, 3)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(layer.Update(PositionTensor(2, 1), PositionTensor(2, 2)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(StaticLayerTest, KeysAndValuesMayDifferInHeadDim) {
  StaticLayer layer(4);
  absl::StatusOr<LayerView> view =
      layer.Update(PositionTensor(0, 2, 1, 2, 6), PositionTensor(0, 2, 1, 2, 4));
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->keys.size(3), 6);
  EXPECT_EQ(view->values.size(3), 4);
}

TEST(StaticLayerTest, CropZeroesFreedSlots) {
  StaticLayer layer(6);
  ASSERT_TRUE(layer.Update(PositionTensor(0, 5), PositionTensor(0, 5)).ok());
  ASSERT_TRUE(layer.Crop(-2).ok());
  EXPECT_EQ(layer.SeqLength(), 3);
  absl::StatusOr<LayerView> view = layer.Update(PositionTensor(3, 1), PositionTensor(3, 1));
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(Positions(view->keys), (std::vector<int64_t>{0, 1, 2, 3, 0, 0}));
  ASSERT_TRUE(layer.Crop(2).ok());  // legacy absolute length
  EXPECT_EQ(layer.SeqLength(), 2);
  ASSERT_TRUE(layer.Crop(-10).ok());
  EXPECT_EQ(layer.SeqLength(), 0);
}

TEST(StaticLayerTest, BeamHelpers) {
  StaticLayer layer(4);
  ASSERT_TRUE(layer.Update(PositionTensor(0, 2, 3), PositionTensor(0, 2, 3)).ok());
  ASSERT_TRUE(layer.Reorder(at::tensor({2, 2, 0}, at::kLong)).ok());
  absl::StatusOr<LayerView> view = layer.Update(PositionTensor(2, 1, 3), PositionTensor(2, 1, 3));
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->keys[0][0][0][0].item<float>(), 2000);
  EXPECT_EQ(view->keys[2][0][0][0].item<float>(), 0);
  EXPECT_FALSE(layer.Reorder(at::tensor({0, 1}, at::kLong)).ok());
  ASSERT_TRUE(layer.SelectIndices(at::tensor({1}, at::kLong)).ok());
  EXPECT_EQ(layer.BatchSize(), 1);
  ASSERT_TRUE(layer.RepeatInterleave(4).ok());
  EXPECT_EQ(layer.BatchSize(), 4);
  EXPECT_EQ(layer.Memory().device_bytes, 2 * 4 * 2 * 4 * 4 * 4);
}

TEST(StaticLayerTest, CloneIsDeepAndResetFrees) {
  StaticLayer layer(4);
  ASSERT_TRUE(layer.Update(PositionTensor(0, 2), PositionTensor(0, 2)).ok());
  std::unique_ptr<CacheLayer> copy = layer.Clone();
  ASSERT_TRUE(layer.Update(PositionTensor(7, 1), PositionTensor(7, 1)).ok());
  absl::StatusOr<LayerView> view = copy->Update(PositionTensor(2, 1), PositionTensor(2, 1));
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(Positions(view->keys), (std::vector<int64_t>{0, 1, 2, 0}));
  layer.Reset();
  EXPECT_EQ(layer.SeqLength(), 0);
  EXPECT_EQ(layer.Memory(), MemoryUsage{});
}

}  // namespace
}  // namespace kvserve::cache
