// Tests for KvCache: construction from layer specs, all-or-nothing crop, memory, clone, staged
// prefixes.
#include "cache/kv_cache.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cache/dynamic_sliding_window_layer.h"
#include "cache/static_layer.h"
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

TEST(KvCacheTest, UpdateRefusesALayerOutOfRange) {
  auto cache = *KvCache::CreateDynamic(MixedLayers());
  for (int layer : {-1, 3}) {
    absl::StatusOr<LayerView> view =
        cache->Update(layer, PositionTensor(0, 2), PositionTensor(0, 2));
    EXPECT_EQ(view.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(view.status().message(),
              "layer " + std::to_string(layer) + " is out of range [0, 3)");
  }
  EXPECT_EQ(cache->SeqLength(), 0);
  EXPECT_EQ(cache->Memory().total(), 0);
}

// layer(i) is for the model's own layer loop: out of range is a bug, caught in debug builds.
TEST(KvCacheDeathTest, LayerOutOfRangeIsCaughtInDebugBuilds) {
#ifdef NDEBUG
  GTEST_SKIP() << "KVSERVE_DCHECK is compiled out with NDEBUG (make sanitize runs it)";
#else
  auto cache = *KvCache::CreateDynamic(MixedLayers());
  EXPECT_DEATH(cache->layer(3), "layer 3 of 3");
  EXPECT_DEATH(cache->layer(-1), "layer -1 of 3");
#endif
}

// Two full-attention dynamic layers.
std::unique_ptr<KvCache> TwoLayers() { return *KvCache::CreateDynamic({{}, {}}); }

TEST(KvCacheTest, StagePrefixRefusals) {
  auto cache = TwoLayers();
  const at::Tensor k = PositionTensor(0, 3);
  EXPECT_EQ(cache->StagePrefix(2, k, k).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cache->StagePrefix(-1, k, k).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cache->StagePrefix(0, k.select(0, 0), k.select(0, 0)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cache->StagePrefix(0, k, PositionTensor(0, 4)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cache->StagePrefix(0, at::Tensor(), at::Tensor()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cache->SeqLength(), 0);

  ASSERT_TRUE(cache->StagePrefix(0, k, k).ok());
  absl::Status twice = cache->StagePrefix(0, k, k);
  EXPECT_EQ(twice.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(twice.message(),
            "layer 0 is not empty: a prefix is staged only before the layer's first update");
  // A layer that holds tokens takes no prefix either.
  ASSERT_TRUE(cache->Update(1, k, k).ok());
  EXPECT_EQ(cache->StagePrefix(1, k, k).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(KvCacheTest, StagedPrefixJoinsTheLayersFirstUpdate) {
  auto cache = TwoLayers();
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(cache->StagePrefix(i, PositionTensor(0, 5), PositionTensor(0, 5)).ok());
  }
  // Counted as seen, held as the caller's views: no storage of the cache's own.
  EXPECT_EQ(cache->SeqLength(), 5);
  EXPECT_EQ(cache->layer(0).SeqLength(), 0);
  EXPECT_EQ(cache->Memory().total(), 0);

  absl::StatusOr<LayerView> view = cache->Update(0, PositionTensor(5, 2), PositionTensor(5, 2));
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->kv_offset, 0);
  EXPECT_EQ(view->num_valid, 7);
  EXPECT_EQ(testing::Positions(view->keys.narrow(2, 0, 7)),
            (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(cache->layer(0).SeqLength(), 7);
  EXPECT_EQ(cache->SeqLength(), 7);  // layer 0's count; its staged prefix is gone
  EXPECT_EQ(cache->layer(1).SeqLength(), 0);
  ASSERT_TRUE(cache->Update(1, PositionTensor(5, 2), PositionTensor(5, 2)).ok());
  EXPECT_EQ(cache->layer(1).SeqLength(), 7);
  // Later updates append as usual.
  view = cache->Update(0, PositionTensor(7, 1), PositionTensor(7, 1));
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->num_valid, 8);
  EXPECT_EQ(cache->SeqLength(), 8);
}

TEST(KvCacheTest, AFailedUpdateKeepsTheStagedPrefix) {
  auto cache = TwoLayers();
  ASSERT_TRUE(cache->StagePrefix(0, PositionTensor(0, 5), PositionTensor(0, 5)).ok());
  // Another head_dim, batch or dtype cannot join the prefix: refused, not thrown.
  for (const at::Tensor& bad : {PositionTensor(5, 1, 1, 2, 8), PositionTensor(5, 1, 2),
                                PositionTensor(5, 1).to(at::kDouble)}) {
    absl::StatusOr<LayerView> view = cache->Update(0, bad, bad);
    EXPECT_EQ(view.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(cache->SeqLength(), 5);
  }
  EXPECT_EQ(cache->Update(0, PositionTensor(5, 1), PositionTensor(5, 2)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cache->SeqLength(), 5);

  // The layer itself refuses (a static layer of 6 slots cannot take 5 + 2): the prefix stays.
  std::vector<std::unique_ptr<CacheLayer>> layers;
  layers.push_back(std::make_unique<StaticLayer>(6));
  KvCache bounded(std::move(layers));
  ASSERT_TRUE(bounded.StagePrefix(0, PositionTensor(0, 5), PositionTensor(0, 5)).ok());
  EXPECT_EQ(bounded.Update(0, PositionTensor(5, 2), PositionTensor(5, 2)).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(bounded.SeqLength(), 5);
  EXPECT_EQ(bounded.layer(0).SeqLength(), 0);
  ASSERT_TRUE(bounded.Update(0, PositionTensor(5, 1), PositionTensor(5, 1)).ok());
  EXPECT_EQ(bounded.layer(0).SeqLength(), 6);
}

TEST(KvCacheTest, CropIsRefusedWhileAPrefixIsStaged) {
  auto cache = TwoLayers();
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(cache->StagePrefix(i, PositionTensor(0, 5), PositionTensor(0, 5)).ok());
  }
  EXPECT_EQ(cache->Crop(-1).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(cache->Crop(3).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(cache->Crop(0).ok());  // frees recorded states only
  EXPECT_EQ(cache->SeqLength(), 5);
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(cache->Update(i, PositionTensor(5, 2), PositionTensor(5, 2)).ok());
  }
  ASSERT_TRUE(cache->Crop(-1).ok());
  EXPECT_EQ(cache->SeqLength(), 6);
}

TEST(KvCacheTest, CloneAndResetOfAStagedCache) {
  auto cache = TwoLayers();
  ASSERT_TRUE(cache->StagePrefix(0, PositionTensor(0, 5), PositionTensor(0, 5)).ok());
  std::unique_ptr<KvCache> copy = cache->Clone();
  EXPECT_EQ(copy->SeqLength(), 5);
  absl::StatusOr<LayerView> view = copy->Update(0, PositionTensor(5, 1), PositionTensor(5, 1));
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->num_valid, 6);
  // The original still waits with its own prefix.
  EXPECT_EQ(cache->SeqLength(), 5);
  EXPECT_EQ(cache->layer(0).SeqLength(), 0);
  cache->Reset();
  EXPECT_EQ(cache->SeqLength(), 0);
  ASSERT_TRUE(cache->Update(0, PositionTensor(0, 2), PositionTensor(0, 2)).ok());
  EXPECT_EQ(cache->SeqLength(), 2);
}

TEST(KvCacheTest, BeamOperationsApplyToStagedRows) {
  auto cache = TwoLayers();
  // Two rows: row r's elements are position + 1000 r.
  ASSERT_TRUE(cache->StagePrefix(0, PositionTensor(0, 3, 2), PositionTensor(0, 3, 2)).ok());
  // Indices are checked against the staged rows before anything changes.
  EXPECT_EQ(cache->Reorder(at::tensor({0, 2}, at::kLong)).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(cache->SelectIndices(at::tensor({5}, at::kLong)).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(cache->SeqLength(), 3);
  ASSERT_TRUE(cache->Reorder(at::tensor({1, 0}, at::kLong)).ok());
  ASSERT_TRUE(cache->RepeatInterleave(2).ok());                           // rows 1, 1, 0, 0
  ASSERT_TRUE(cache->SelectIndices(at::tensor({1, 2}, at::kLong)).ok());  // rows 1, 0
  absl::StatusOr<LayerView> view =
      cache->Update(0, PositionTensor(3, 1, 2), PositionTensor(3, 1, 2));
  ASSERT_TRUE(view.ok());
  ASSERT_EQ(view->keys.size(0), 2);
  EXPECT_EQ(view->keys[0][0][0][0].item<float>(), 1000);  // row 1's position 0
  EXPECT_EQ(view->keys[1][0][0][0].item<float>(), 0);     // row 0's position 0
  EXPECT_EQ(view->keys[0][0][3][0].item<float>(), 3);     // the new token as given
}

TEST(KvCacheTest, RollbackRestoresTheStagedPrefix) {
  auto cache = TwoLayers();
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(cache->StagePrefix(i, PositionTensor(0, 5), PositionTensor(0, 5)).ok());
  }
  cache->BeginStep();
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(cache->Update(i, PositionTensor(5, 2), PositionTensor(5, 2)).ok());
  }
  EXPECT_EQ(cache->SeqLength(), 7);
  ASSERT_TRUE(cache->RollbackStep().ok());
  EXPECT_EQ(cache->SeqLength(), 5);
  EXPECT_EQ(cache->layer(0).SeqLength(), 0);
  EXPECT_EQ(cache->layer(1).SeqLength(), 0);
  EXPECT_EQ(cache->Memory().total(), 0);
  // The retry joins the prefix again; after a commit there is nothing left to restore.
  cache->BeginStep();
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<LayerView> view = cache->Update(i, PositionTensor(5, 2), PositionTensor(5, 2));
    ASSERT_TRUE(view.ok());
    EXPECT_EQ(view->num_valid, 7);
  }
  cache->CommitStep();
  cache->BeginStep();
  ASSERT_TRUE(cache->Update(0, PositionTensor(7, 1), PositionTensor(7, 1)).ok());
  ASSERT_TRUE(cache->RollbackStep().ok());
  EXPECT_EQ(cache->SeqLength(), 7);
  EXPECT_EQ(cache->layer(0).SeqLength(), 7);
}

}  // namespace
}  // namespace kvserve::cache
