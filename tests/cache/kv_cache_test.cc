// Tests for KvCache: construction from layer specs, all-or-nothing crop, memory, clone.
#include "cache/kv_cache.h"

#include <gtest/gtest.h>

#include "cache/dynamic_sliding_window_layer.h"
#include "tests/cache/test_tensors.h"

namespace kvserve::cache {
namespace {

using testing::PositionTensor;

std::vector<LayerSpec> MixedLayers() {
  return {{LayerType::kFullAttention, 0},
          {LayerType::kSlidingAttention, 2},
          {LayerType::kChunkedAttention, 4}};
}

TEST(KvCacheTest, CreateDynamicPicksLayerClasses) {
  auto cache = KvCache::CreateDynamic(MixedLayers());
  ASSERT_TRUE(cache.ok());
  ASSERT_EQ((*cache)->num_layers(), 3);
  EXPECT_EQ((*cache)->layer(0).type(), LayerType::kFullAttention);
  EXPECT_EQ((*cache)->layer(1).type(), LayerType::kSlidingAttention);
  EXPECT_EQ((*cache)->layer(2).type(), LayerType::kChunkedAttention);
  EXPECT_EQ((*cache)->MaxLength(), -1);
}

TEST(KvCacheTest, RejectsWindowBelowTwo) {
  auto cache = KvCache::CreateDynamic({{LayerType::kSlidingAttention, 1}});
  EXPECT_EQ(cache.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(cache.status().message().find("layer 0"), std::string::npos);
}

TEST(KvCacheTest, CropIsAllOrNothing) {
  auto cache = *KvCache::CreateDynamic(MixedLayers());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(cache->Update(i, PositionTensor(0, 6), PositionTensor(0, 6)).ok());
  }
  // The sliding layer's window filled without recording: the whole crop is refused and
  // the full layer keeps its 6 tokens.
  EXPECT_EQ(cache->Crop(-3).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(cache->layer(0).SeqLength(), 6);
  EXPECT_EQ(cache->SeqLength(), 6);
}

TEST(KvCacheTest, RecordingCropRollsEveryLayerBack) {
  auto cache = *KvCache::CreateDynamic(MixedLayers());
  cache->ActivatePastRecording();
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(cache->Update(i, PositionTensor(0, 6), PositionTensor(0, 6)).ok());
  }
  ASSERT_TRUE(cache->Crop(-3).ok());
  for (int i = 0; i < 3; ++i) EXPECT_EQ(cache->layer(i).SeqLength(), 3);
  EXPECT_EQ(static_cast<DynamicSlidingWindowLayer&>(cache->layer(1)).num_stored_tokens(), 1);
  EXPECT_EQ(static_cast<DynamicSlidingWindowLayer&>(cache->layer(2)).num_stored_tokens(), 3);
}

TEST(KvCacheTest, MemoryCloneAndReset) {
  auto cache = *KvCache::CreateDynamic({{LayerType::kFullAttention, 0}});
  ASSERT_TRUE(cache->Update(0, PositionTensor(0, 10), PositionTensor(0, 10)).ok());
  const MemoryUsage before = cache->Memory();
  EXPECT_EQ(before.device_bytes, 2 * 2 * 64 * 4 * 4);
  EXPECT_EQ(before.host_bytes, 0);
  std::unique_ptr<KvCache> copy = cache->Clone();
  EXPECT_EQ(copy->Memory().device_bytes, 2 * 2 * 10 * 4 * 4);
  cache->Reset();
  EXPECT_EQ(cache->Memory().total(), 0);
  EXPECT_EQ(copy->SeqLength(), 10);
}

TEST(KvCacheTest, ReorderChecksIndicesBeforeChangingAnything) {
  auto cache = *KvCache::CreateDynamic(MixedLayers());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(cache->Update(i, PositionTensor(0, 3, 2), PositionTensor(0, 3, 2)).ok());
  }
  EXPECT_FALSE(cache->Reorder(at::tensor({0, 5}, at::kLong)).ok());
  ASSERT_TRUE(cache->Reorder(at::tensor({1, 0}, at::kLong)).ok());
  ASSERT_TRUE(cache->RepeatInterleave(2).ok());
  for (int i = 0; i < 3; ++i) EXPECT_EQ(cache->layer(i).BatchSize(), 4);
}

}  // namespace
}  // namespace kvserve::cache
