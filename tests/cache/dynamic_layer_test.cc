// Tests for DynamicLayer: returned views, crop semantics, beam helpers, clone, memory.
#include "cache/dynamic_layer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/cache/test_tensors.h"

namespace kvserve::cache {
namespace {

using ::testing::ElementsAre;
using testing::Positions;
using testing::PositionTensor;

TEST(DynamicLayerTest, UpdateReturnsEverythingStored) {
  DynamicLayer layer;
  EXPECT_EQ(layer.SeqLength(), 0);
  EXPECT_EQ(layer.MaxLength(), -1);
  EXPECT_EQ(layer.Memory().total(), 0);  // lazy: nothing before the first update
  auto view = layer.Update(PositionTensor(0, 3), PositionTensor(0, 3));
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->kv_offset, 0);
  EXPECT_EQ(view->num_valid, 3);
  EXPECT_THAT(Positions(view->keys), ElementsAre(0, 1, 2));
  view = layer.Update(PositionTensor(3, 1), PositionTensor(3, 1));
  ASSERT_TRUE(view.ok());
  EXPECT_THAT(Positions(view->values), ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(layer.SeqLength(), 4);
  EXPECT_EQ(layer.BatchSize(), 1);
}

TEST(DynamicLayerTest, UpdateWithWrongShapeLeavesLayerUnchanged) {
  DynamicLayer layer;
  ASSERT_TRUE(layer.Update(PositionTensor(0, 2), PositionTensor(0, 2)).ok());
  auto bad = layer.Update(PositionTensor(2, 1, 1, 3), PositionTensor(2, 1, 1, 3));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(layer.SeqLength(), 2);
}

TEST(DynamicLayerTest, CropNegativeZeroAndLegacyPositive) {
  DynamicLayer layer;
  ASSERT_TRUE(layer.Update(PositionTensor(0, 6), PositionTensor(0, 6)).ok());
  ASSERT_TRUE(layer.Crop(0).ok());
  EXPECT_EQ(layer.SeqLength(), 6);
  ASSERT_TRUE(layer.Crop(-3).ok());
  EXPECT_EQ(layer.SeqLength(), 3);
  ASSERT_TRUE(layer.Crop(5).ok());  // legacy absolute target above the length: no-op
  EXPECT_EQ(layer.SeqLength(), 3);
  ASSERT_TRUE(layer.Crop(2).ok());
  EXPECT_EQ(layer.SeqLength(), 2);
  ASSERT_TRUE(layer.Crop(-10).ok());
  EXPECT_EQ(layer.SeqLength(), 0);
  // Generation resumes at the cropped position.
  auto view = layer.Update(PositionTensor(0, 1), PositionTensor(0, 1));
  ASSERT_TRUE(view.ok());
  EXPECT_THAT(Positions(view->keys), ElementsAre(0));
}

TEST(DynamicLayerTest, BeamHelpers) {
  DynamicLayer layer;
  ASSERT_TRUE(layer.Update(PositionTensor(0, 2, /*batch=*/1), PositionTensor(0, 2, 1)).ok());
  ASSERT_TRUE(layer.RepeatInterleave(3).ok());
  EXPECT_EQ(layer.BatchSize(), 3);
  ASSERT_TRUE(layer.Reorder(at::tensor({2, 0, 1}, at::kLong)).ok());
  EXPECT_EQ(layer.Reorder(at::tensor({0, 1}, at::kLong)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(layer.Reorder(at::tensor({0, 1, 3}, at::kLong)).code(), absl::StatusCode::kOutOfRange);
  ASSERT_TRUE(layer.SelectIndices(at::tensor({1}, at::kLong)).ok());
  EXPECT_EQ(layer.BatchSize(), 1);
  EXPECT_EQ(layer.RepeatInterleave(0).code(), absl::StatusCode::kInvalidArgument);
}

TEST(DynamicLayerTest, CloneIsDeepAndCompact) {
  DynamicLayer layer;
  ASSERT_TRUE(layer.Update(PositionTensor(0, 5), PositionTensor(0, 5)).ok());
  std::unique_ptr<CacheLayer> copy = layer.Clone();
  EXPECT_EQ(copy->SeqLength(), 5);
  EXPECT_EQ(copy->Memory().device_bytes, 2 * 2 * 5 * 4 * 4);  // exactly the stored tokens
  ASSERT_TRUE(copy->Update(PositionTensor(5, 1), PositionTensor(5, 1)).ok());
  EXPECT_EQ(layer.SeqLength(), 5);
  layer.Reset();
  EXPECT_EQ(layer.SeqLength(), 0);
  EXPECT_EQ(layer.Memory().total(), 0);
  EXPECT_EQ(copy->SeqLength(), 6);
}

TEST(DynamicLayerTest, KeysAndValuesAreTheStoredTokensOnly) {
  DynamicLayer layer;
  EXPECT_FALSE(layer.keys().defined());
  EXPECT_FALSE(layer.values().defined());
  ASSERT_TRUE(layer.Update(PositionTensor(0, 3), PositionTensor(10, 3)).ok());
  ASSERT_TRUE(layer.Update(PositionTensor(3, 2), PositionTensor(13, 2)).ok());
  EXPECT_THAT(layer.keys().sizes(), ElementsAre(1, 2, 5, 4));  // not the 64-token capacity
  EXPECT_THAT(Positions(layer.keys()), ElementsAre(0, 1, 2, 3, 4));
  EXPECT_THAT(Positions(layer.values()), ElementsAre(10, 11, 12, 13, 14));
  ASSERT_TRUE(layer.Crop(-2).ok());
  EXPECT_THAT(Positions(layer.keys()), ElementsAre(0, 1, 2));
}

}  // namespace
}  // namespace kvserve::cache
