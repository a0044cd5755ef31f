// Tests for DynamicSlidingWindowLayer: window-1 storage, recording, and the crop rules.
#include "cache/dynamic_sliding_window_layer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cache/dynamic_layer.h"
#include "tests/cache/test_tensors.h"

namespace kvserve::cache {
namespace {

using ::testing::ElementsAre;
using testing::Positions;
using testing::PositionTensor;

TEST(DynamicSlidingWindowLayerTest, KeepsWindowMinusOneAndReturnsFullUpdate) {
  DynamicSlidingWindowLayer layer(LayerType::kSlidingAttention, 4);
  EXPECT_EQ(layer.MaxLength(), 4);
  auto view = layer.Update(PositionTensor(0, 6), PositionTensor(0, 6));
  ASSERT_TRUE(view.ok());
  // A prefill longer than the window sees every prompt token; the mask applies the window.
  EXPECT_THAT(Positions(view->keys), ElementsAre(0, 1, 2, 3, 4, 5));
  EXPECT_EQ(view->kv_offset, 0);
  EXPECT_EQ(layer.SeqLength(), 6);
  EXPECT_EQ(layer.num_stored_tokens(), 3);
  view = layer.Update(PositionTensor(6, 1), PositionTensor(6, 1));
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->kv_offset, 3);
  EXPECT_THAT(Positions(view->keys), ElementsAre(3, 4, 5, 6));
  EXPECT_EQ(layer.num_stored_tokens(), 3);
}

TEST(DynamicSlidingWindowLayerTest, LongDecodeStaysBoundedAndOrdered) {
  DynamicSlidingWindowLayer layer(LayerType::kChunkedAttention, 8);
  ASSERT_TRUE(layer.Update(PositionTensor(0, 1), PositionTensor(0, 1)).ok());
  for (int64_t t = 1; t < 500; ++t) {
    auto view = layer.Update(PositionTensor(t, 1), PositionTensor(t, 1));
    ASSERT_TRUE(view.ok());
    const int64_t first = std::max<int64_t>(0, t - 7);
    ASSERT_EQ(view->kv_offset, first);
    ASSERT_EQ(Positions(view->keys).front(), first);
    ASSERT_EQ(Positions(view->keys).back(), t);
  }
  // Storage stays at the window plus bounded headroom, not the sequence length.
  EXPECT_LE(layer.Memory().device_bytes, 2 * 2 * 128 * 4 * 4);
}

// The diagram of the cache-strategy document: 6 cached tokens, crop(-3); the full layer
// keeps 0..2, the sliding_window=2 layer keeps token 2; both report length 3.
TEST(DynamicSlidingWindowLayerTest, CropDiagramOfTheSeedDocument) {
  DynamicLayer full;
  DynamicSlidingWindowLayer sliding(LayerType::kSlidingAttention, 2);
  sliding.ActivatePastRecording();
  ASSERT_TRUE(full.Update(PositionTensor(0, 6), PositionTensor(0, 6)).ok());
  ASSERT_TRUE(sliding.Update(PositionTensor(0, 6), PositionTensor(0, 6)).ok());
  ASSERT_TRUE(full.Crop(-3).ok());
  ASSERT_TRUE(sliding.Crop(-3).ok());
  EXPECT_EQ(full.SeqLength(), 3);
  EXPECT_EQ(sliding.SeqLength(), 3);
  EXPECT_EQ(sliding.num_stored_tokens(), 1);
  // Generation resumes at position 3; the sliding layer shows token 2 and the new token.
  auto view = sliding.Update(PositionTensor(3, 1), PositionTensor(3, 1));
  ASSERT_TRUE(view.ok());
  EXPECT_THAT(Positions(view->keys), ElementsAre(2, 3));
  EXPECT_EQ(view->kv_offset, 2);
}

TEST(DynamicSlidingWindowLayerTest, CropWithoutRecordingAfterWindowFilledIsAnError) {
  DynamicSlidingWindowLayer layer(LayerType::kSlidingAttention, 2);
  ASSERT_TRUE(layer.Update(PositionTensor(0, 6), PositionTensor(0, 6)).ok());
  absl::Status s = layer.Crop(-3);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("ActivatePastRecording"));
  EXPECT_EQ(layer.SeqLength(), 6);  // unchanged
}

TEST(DynamicSlidingWindowLayerTest, CropBeforeWindowFillsIsPlain) {
  DynamicSlidingWindowLayer layer(LayerType::kSlidingAttention, 8);
  ASSERT_TRUE(layer.Update(PositionTensor(0, 5), PositionTensor(0, 5)).ok());
  ASSERT_TRUE(layer.Crop(-2).ok());
  EXPECT_EQ(layer.SeqLength(), 3);
  EXPECT_EQ(layer.num_stored_tokens(), 3);
}

TEST(DynamicSlidingWindowLayerTest, CropZeroFreesRecordedStates) {
  DynamicSlidingWindowLayer layer(LayerType::kSlidingAttention, 3);
  layer.ActivatePastRecording();
  ASSERT_TRUE(layer.Update(PositionTensor(0, 10), PositionTensor(0, 10)).ok());
  EXPECT_EQ(layer.num_stored_tokens(), 10);
  ASSERT_TRUE(layer.Crop(0).ok());
  EXPECT_EQ(layer.num_stored_tokens(), 2);
  EXPECT_EQ(layer.SeqLength(), 10);
  EXPECT_TRUE(layer.recording());  // sticky
  // Positive crop of a filled layer is refused; so is cropping past what is recorded.
  EXPECT_EQ(layer.Crop(4).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(layer.Crop(-1).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(layer.SeqLength(), 10);
}

TEST(DynamicSlidingWindowLayerTest, CloneCopiesCountersAndRecording) {
  DynamicSlidingWindowLayer layer(LayerType::kSlidingAttention, 4);
  layer.ActivatePastRecording();
  ASSERT_TRUE(layer.Update(PositionTensor(0, 9), PositionTensor(0, 9)).ok());
  std::unique_ptr<CacheLayer> copy = layer.Clone();
  EXPECT_EQ(copy->SeqLength(), 9);
  ASSERT_TRUE(copy->Crop(-2).ok());
  EXPECT_EQ(copy->SeqLength(), 7);
  EXPECT_EQ(layer.SeqLength(), 9);
  layer.Reset();
  EXPECT_EQ(layer.SeqLength(), 0);
  EXPECT_EQ(layer.Memory().total(), 0);
}

}  // namespace
}  // namespace kvserve::cache

namespace kvserve::cache {
namespace {

using ::testing::ElementsAre;
using testing::Positions;
using testing::PositionTensor;

TEST(DynamicSlidingWindowSharedPrefixTest, ReadsTheKeptPartInPlaceUntilTheWindowPassesIt) {
  const at::Tensor keys = PositionTensor(0, 6);
  const at::Tensor before = keys.clone();
  DynamicSlidingWindowLayer layer(LayerType::kSlidingAttention, 4);  // keeps 3 tokens
  ASSERT_TRUE(layer.AttachSharedPrefix(keys, keys).ok());
  EXPECT_EQ(layer.SeqLength(), 6);
  EXPECT_EQ(layer.SharedPrefixLength(), 3);  // positions 3, 4, 5
  EXPECT_EQ(layer.Memory().device_bytes, 0);
  absl::StatusOr<LayerView> view = layer.Update(PositionTensor(6, 1), PositionTensor(6, 1));
  ASSERT_TRUE(view.ok());
  EXPECT_THAT(Positions(view->prefix_keys), ElementsAre(3, 4, 5));
  EXPECT_THAT(Positions(view->keys), ElementsAre(6));
  EXPECT_EQ(view->kv_offset, 3);
  EXPECT_EQ(layer.SharedPrefixLength(), 2);  // the window moved on by one
  ASSERT_TRUE(layer.Update(PositionTensor(7, 2), PositionTensor(7, 2)).ok());
  EXPECT_EQ(layer.SharedPrefixLength(), 0);  // past the segment: let go
  EXPECT_EQ(layer.num_stored_tokens(), 3);
  EXPECT_EQ(layer.SeqLength(), 9);
  EXPECT_TRUE(at::equal(keys, before));
}

TEST(DynamicSlidingWindowSharedPrefixTest, RecordedCropIntoTheSegmentCopiesWhatStays) {
  const at::Tensor keys = PositionTensor(0, 3);
  const at::Tensor before = keys.clone();
  DynamicSlidingWindowLayer layer(LayerType::kChunkedAttention, 8);
  layer.RetainPast();  // a session's cache: every token kept
  ASSERT_TRUE(layer.AttachSharedPrefix(keys, keys).ok());
  ASSERT_TRUE(layer.Update(PositionTensor(3, 2), PositionTensor(3, 2)).ok());
  EXPECT_EQ(layer.SharedPrefixLength(), 3);
  ASSERT_TRUE(layer.Crop(-3).ok());  // back to 2 tokens, into the segment
  EXPECT_EQ(layer.SharedPrefixLength(), 0);
  EXPECT_EQ(layer.SeqLength(), 2);
  absl::StatusOr<LayerView> view = layer.Update(PositionTensor(2, 1), PositionTensor(2, 1));
  ASSERT_TRUE(view.ok());
  EXPECT_FALSE(view->prefix_keys.defined());
  EXPECT_THAT(Positions(view->keys), ElementsAre(0, 1, 2));
  EXPECT_TRUE(at::equal(keys, before));
}

}  // namespace
}  // namespace kvserve::cache
