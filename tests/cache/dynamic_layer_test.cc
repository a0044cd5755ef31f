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

namespace kvserve::cache {
namespace {

using ::testing::ElementsAre;
using testing::Positions;
using testing::PositionTensor;

// A read-only segment of positions [0, n) and a copy to check it is never written.
struct Segment {
  at::Tensor keys = PositionTensor(0, 5);
  at::Tensor values = PositionTensor(0, 5) + 0.5;
  at::Tensor keys_before = keys.clone();
  at::Tensor values_before = values.clone();
  void ExpectUntouched() const {
    EXPECT_TRUE(at::equal(keys, keys_before));
    EXPECT_TRUE(at::equal(values, values_before));
  }
};

TEST(DynamicLayerSharedPrefixTest, ReadsTheSegmentInPlaceAndAppendsItsOwnTail) {
  Segment segment;
  DynamicLayer layer;
  ASSERT_TRUE(layer.AttachSharedPrefix(segment.keys, segment.values).ok());
  EXPECT_EQ(layer.SeqLength(), 5);
  EXPECT_EQ(layer.SharedPrefixLength(), 5);
  EXPECT_EQ(layer.Memory().device_bytes, 0);  // the segment is counted with its snapshot
  absl::StatusOr<LayerView> view = layer.Update(PositionTensor(5, 2), PositionTensor(5, 2));
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->prefix_keys.data_ptr(), segment.keys.data_ptr());  // no copy
  EXPECT_EQ(view->prefix_length(), 5);
  EXPECT_THAT(Positions(view->keys), ElementsAre(5, 6));
  EXPECT_EQ(view->kv_offset, 0);
  EXPECT_EQ(layer.SeqLength(), 7);
  EXPECT_THAT(Positions(layer.keys()), ElementsAre(0, 1, 2, 3, 4, 5, 6));  // a capture's view
  EXPECT_EQ(layer.Memory().device_bytes, 2 * 64 * 2 * 4 * 4);              // one granule
  // An attached layer must be empty, and the segment one row.
  EXPECT_EQ(layer.AttachSharedPrefix(segment.keys, segment.values).code(),
            absl::StatusCode::kFailedPrecondition);
  segment.ExpectUntouched();
}

TEST(DynamicLayerSharedPrefixTest, CropIntoTheSegmentCopiesWhatStays) {
  Segment segment;
  DynamicLayer layer;
  ASSERT_TRUE(layer.AttachSharedPrefix(segment.keys, segment.values).ok());
  ASSERT_TRUE(layer.Update(PositionTensor(5, 3), PositionTensor(5, 3)).ok());
  ASSERT_TRUE(layer.Crop(-2).ok());  // tail only
  EXPECT_EQ(layer.SharedPrefixLength(), 5);
  EXPECT_EQ(layer.SeqLength(), 6);
  ASSERT_TRUE(layer.Crop(-3).ok());  // into the segment: copy on write
  EXPECT_EQ(layer.SharedPrefixLength(), 0);
  EXPECT_EQ(layer.SeqLength(), 3);
  absl::StatusOr<LayerView> view = layer.Update(PositionTensor(3, 1), PositionTensor(3, 1));
  ASSERT_TRUE(view.ok());
  EXPECT_FALSE(view->prefix_keys.defined());
  EXPECT_THAT(Positions(view->keys), ElementsAre(0, 1, 2, 3));
  segment.ExpectUntouched();
}

TEST(DynamicLayerSharedPrefixTest, BeamRowsShareTheSegmentAndReorderOnlyTheirTails) {
  Segment segment;
  DynamicLayer layer;
  ASSERT_TRUE(layer.AttachSharedPrefix(segment.keys, segment.values).ok());
  ASSERT_TRUE(layer.Update(PositionTensor(5, 1), PositionTensor(5, 1)).ok());
  ASSERT_TRUE(layer.RepeatInterleave(3).ok());
  EXPECT_EQ(layer.BatchSize(), 3);
  absl::StatusOr<LayerView> view =
      layer.Update(PositionTensor(6, 1, /*batch=*/3), PositionTensor(6, 1, 3));
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->prefix_keys.size(0), 1);  // one segment for every row
  const at::Tensor reorder = at::tensor(std::vector<int64_t>{2, 2, 0});
  ASSERT_TRUE(layer.Reorder(reorder).ok());
  const at::Tensor keys = layer.keys();  // [3, heads, 7, dim]
  // Row 0 now holds old row 2's token 6 (encoded +2000), its segment part unchanged.
  EXPECT_THAT(Positions(keys), ElementsAre(0, 1, 2, 3, 4, 5, 2006));
  EXPECT_EQ(keys[0][0][6][0].item<float>(), 2006.0f);
  EXPECT_EQ(keys[2][0][6][0].item<float>(), 6.0f);
  EXPECT_EQ(keys[1][0][0][0].item<float>(), 0.0f);
  ASSERT_TRUE(layer.SelectIndices(at::tensor(std::vector<int64_t>{1})).ok());
  EXPECT_EQ(layer.BatchSize(), 1);
  EXPECT_EQ(layer.SharedPrefixLength(), 5);
  segment.ExpectUntouched();
}

TEST(DynamicLayerSharedPrefixTest, CloneKeepsTheSegmentSharedAndResetDropsIt) {
  Segment segment;
  DynamicLayer layer;
  ASSERT_TRUE(layer.AttachSharedPrefix(segment.keys, segment.values).ok());
  ASSERT_TRUE(layer.Update(PositionTensor(5, 1), PositionTensor(5, 1)).ok());
  std::unique_ptr<CacheLayer> clone = layer.Clone();
  EXPECT_EQ(clone->SharedPrefixLength(), 5);
  EXPECT_EQ(clone->SeqLength(), 6);
  layer.Reset();
  EXPECT_EQ(layer.SeqLength(), 0);
  EXPECT_EQ(layer.SharedPrefixLength(), 0);
  // A tail update with the wrong heads is refused against the segment.
  DynamicLayer other;
  ASSERT_TRUE(other.AttachSharedPrefix(segment.keys, segment.values).ok());
  EXPECT_EQ(other.Update(PositionTensor(5, 1, 1, 3), PositionTensor(5, 1, 1, 3)).status().code(),
            absl::StatusCode::kInvalidArgument);
  segment.ExpectUntouched();
}

}  // namespace
}  // namespace kvserve::cache
