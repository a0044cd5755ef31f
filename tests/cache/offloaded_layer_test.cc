// Tests for offloading (OffloadedLayer driven by KvCache::Update): residency during and
// between forwards, exact per-device accounting, equality with the non-offloaded cache.
#include "cache/offloaded_layer.h"

#include <gtest/gtest.h>

#include "cache/cache_factory.h"
#include "cache/dynamic_layer.h"
#include "tests/cache/test_tensors.h"

namespace kvserve::cache {
namespace {

using testing::Positions;
using testing::PositionTensor;

std::unique_ptr<KvCache> Make(std::string_view impl, const std::vector<LayerSpec>& layers) {
  absl::StatusOr<CacheSpec> spec = CacheSpec::Parse(impl, {}, true, 64);
  EXPECT_TRUE(spec.ok());
  absl::StatusOr<std::unique_ptr<KvCache>> cache = MakeCache(*spec, layers);
  EXPECT_TRUE(cache.ok()) << cache.status();
  return std::move(*cache);
}

// Layers whose K/V count on the device.
int LayersOnDevice(const KvCache& cache) {
  int n = 0;
  for (int i = 0; i < cache.num_layers(); ++i) n += cache.layer(i).Memory().device_bytes > 0;
  return n;
}

// One forward: every layer updated in order; checks the device bound after each update.
void Forward(KvCache& cache, int64_t start, int64_t n, int max_on_device) {
  cache.PrepareForward();
  EXPECT_LE(LayersOnDevice(cache), max_on_device);
  for (int i = 0; i < cache.num_layers(); ++i) {
    absl::StatusOr<LayerView> view =
        cache.Update(i, PositionTensor(start, n), PositionTensor(start, n));
    ASSERT_TRUE(view.ok()) << view.status();
    EXPECT_LE(LayersOnDevice(cache), max_on_device) << "after layer " << i;
  }
}

std::vector<LayerSpec> FullLayers(int n) { return std::vector<LayerSpec>(n, LayerSpec{}); }

TEST(OffloadedCacheTest, AtMostTwoLayersOnDeviceDuringAForwardNoneBetween) {
  for (std::string_view impl : {"offloaded", "offloaded_static"}) {
    std::unique_ptr<KvCache> cache = Make(impl, FullLayers(4));
    for (int step = 0; step < 3; ++step) {
      Forward(*cache, step == 0 ? 0 : 4 + step, step == 0 ? 5 : 1, 2);
      const MemoryUsage m = cache->Memory();
      EXPECT_EQ(m.device_bytes, 0) << impl;
      EXPECT_GT(m.host_bytes, 0) << impl;
    }
  }
}

TEST(OffloadedCacheTest, AccountingIsExactPerDevice) {
  std::unique_ptr<KvCache> offloaded = Make("offloaded_static", FullLayers(3));
  std::unique_ptr<KvCache> plain = Make("static", FullLayers(3));
  Forward(*offloaded, 0, 4, 2);
  Forward(*plain, 0, 4, 3);
  // Each layer: 2 tensors [1, 2, 64, 4] float32.
  const int64_t layer_bytes = 2 * 2 * 64 * 4 * 4;
  EXPECT_EQ(plain->Memory(), MemoryUsage{.device_bytes = 3 * layer_bytes});
  EXPECT_EQ(offloaded->Memory(), MemoryUsage{.host_bytes = 3 * layer_bytes});
  // Mid-forward: layer 0 written back, layer 1 prefetched while layer 0 computed.
  offloaded->PrepareForward();
  EXPECT_EQ(offloaded->Memory(),
            (MemoryUsage{.device_bytes = layer_bytes, .host_bytes = 2 * layer_bytes}));
  ASSERT_TRUE(offloaded->Update(0, PositionTensor(4, 1), PositionTensor(4, 1)).ok());
  EXPECT_EQ(offloaded->layer(0).Memory(), MemoryUsage{.host_bytes = layer_bytes});
  EXPECT_EQ(offloaded->layer(1).Memory(), MemoryUsage{.device_bytes = layer_bytes});
  EXPECT_EQ(offloaded->layer(2).Memory(), MemoryUsage{.host_bytes = layer_bytes});
}

TEST(OffloadedCacheTest, SlidingLayersStayOnDeviceOnlyForOffloadedStatic) {
  const std::vector<LayerSpec> layers = {
      {LayerType::kSlidingAttention, 4}, {}, {LayerType::kSlidingAttention, 4}, {}};
  std::unique_ptr<KvCache> st = Make("offloaded_static", layers);
  Forward(*st, 0, 6, 4);
  EXPECT_GT(st->layer(0).Memory().device_bytes, 0);
  EXPECT_EQ(st->layer(1).Memory().device_bytes, 0);
  EXPECT_GT(st->layer(2).Memory().device_bytes, 0);
  EXPECT_EQ(st->layer(3).Memory().device_bytes, 0);
  EXPECT_FALSE(st->layer(0).offloaded());
  // The dynamic offloaded cache offloads sliding layers too (offload_only_non_sliding false).
  std::unique_ptr<KvCache> dyn = Make("offloaded", layers);
  Forward(*dyn, 0, 6, 2);
  EXPECT_EQ(dyn->Memory().device_bytes, 0);
  EXPECT_TRUE(dyn->layer(0).offloaded());
}

TEST(OffloadedCacheTest, ContentsEqualTheNonOffloadedCache) {
  for (auto [off, plain] : {std::pair<std::string_view, std::string_view>{"offloaded", "dynamic"},
                            {"offloaded_static", "static"}}) {
    const std::vector<LayerSpec> layers = {{}, {LayerType::kSlidingAttention, 3}, {}};
    std::unique_ptr<KvCache> a = Make(off, layers);
    std::unique_ptr<KvCache> b = Make(plain, layers);
    for (int step = 0; step < 6; ++step) {
      const int64_t start = step == 0 ? 0 : 4 + step;
      const int64_t n = step == 0 ? 5 : 1;
      for (int i = 0; i < 3; ++i) {
        absl::StatusOr<LayerView> va =
            a->Update(i, PositionTensor(start, n), PositionTensor(start, n));
        absl::StatusOr<LayerView> vb =
            b->Update(i, PositionTensor(start, n), PositionTensor(start, n));
        ASSERT_TRUE(va.ok() && vb.ok());
        EXPECT_TRUE(at::equal(va->keys, vb->keys)) << off << " step " << step << " layer " << i;
        EXPECT_EQ(va->kv_offset, vb->kv_offset);
        EXPECT_EQ(va->num_valid, vb->num_valid);
      }
    }
    EXPECT_EQ(a->Memory().total(), b->Memory().total()) << off;
  }
}

TEST(OffloadedCacheTest, CropBeamHelpersAndCloneWorkOnHostStorage) {
  std::unique_ptr<KvCache> cache = Make("offloaded", FullLayers(2));
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(cache->Update(i, PositionTensor(0, 5, 2), PositionTensor(0, 5, 2)).ok());
  }
  ASSERT_TRUE(cache->Crop(-2).ok());
  ASSERT_TRUE(cache->Reorder(at::tensor({1, 0}, at::kLong)).ok());
  std::unique_ptr<KvCache> copy = cache->Clone();
  // The copy stays on the host (compact: dynamic clones keep only the live tokens).
  EXPECT_EQ(copy->Memory().device_bytes, 0);
  EXPECT_EQ(copy->Memory().host_bytes, 2 * 2 * (2 * 2 * 3 * 4) * 4);
  absl::StatusOr<LayerView> view =
      copy->Update(0, PositionTensor(3, 1, 2), PositionTensor(3, 1, 2));
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(Positions(view->keys), (std::vector<int64_t>{1000, 1001, 1002, 3}));
  ASSERT_TRUE(cache->RepeatInterleave(2).ok());
  EXPECT_EQ(cache->layer(1).BatchSize(), 4);
  cache->Reset();
  EXPECT_EQ(cache->Memory(), MemoryUsage{});
}

TEST(OffloadedLayerTest, DirectUpdateMakesTheLayerResident) {
  OffloadedLayer layer(std::make_unique<DynamicLayer>(), std::make_shared<OffloadStream>());
  ASSERT_TRUE(layer.Update(PositionTensor(0, 2), PositionTensor(0, 2)).ok());
  EXPECT_TRUE(layer.resident());
  layer.AfterUpdate();
  EXPECT_FALSE(layer.resident());
  EXPECT_EQ(layer.Memory().device_bytes, 0);
  absl::StatusOr<LayerView> view = layer.Update(PositionTensor(2, 1), PositionTensor(2, 1));
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(Positions(view->keys), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_GT(layer.Memory().device_bytes, 0);
}

}  // namespace
}  // namespace kvserve::cache
