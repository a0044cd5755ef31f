// Tests for EncoderDecoderCache: cross-attention K/V projected once and reused.
#include "cache/encoder_decoder_cache.h"

#include <gtest/gtest.h>

#include "cache/cache_factory.h"
#include "tests/cache/test_tensors.h"

namespace kvserve::cache {
namespace {

using testing::Positions;
using testing::PositionTensor;

std::unique_ptr<KvCache> Make(std::string_view impl, int layers, int64_t max_cache_len = 16) {
  return std::move(
      *MakeCache(*CacheSpec::Parse(impl, {}, true, max_cache_len), std::vector<LayerSpec>(layers)));
}

std::unique_ptr<EncoderDecoderCache> MakePair(std::string_view self_impl,
                                              std::string_view cross_impl) {
  absl::StatusOr<std::unique_ptr<EncoderDecoderCache>> cache =
      EncoderDecoderCache::Create(Make(self_impl, 2), Make(cross_impl, 2, 6));
  EXPECT_TRUE(cache.ok());
  return std::move(*cache);
}

TEST(EncoderDecoderCacheTest, CrossKvIsProjectedOncePerLayerAndReused) {
  for (auto [self_impl, cross_impl] :
       {std::pair<std::string_view, std::string_view>{"dynamic", "dynamic"},
        {"static", "static"},
        {"offloaded", "offloaded_static"}}) {
    std::unique_ptr<EncoderDecoderCache> cache = MakePair(self_impl, cross_impl);
    int projections = 0;
    auto project = [&] {
      ++projections;
      // The encoder output: 6 positions 100..105.
      return std::make_pair(PositionTensor(100, 6), PositionTensor(100, 6));
    };
    for (int step = 0; step < 4; ++step) {
      for (int layer = 0; layer < 2; ++layer) {
        EXPECT_EQ(cache->is_updated(layer), step > 0);
        ASSERT_TRUE(
            cache->UpdateSelf(layer, PositionTensor(step, 1), PositionTensor(step, 1)).ok());
        absl::StatusOr<LayerView> cross = cache->CrossAttention(layer, project);
        ASSERT_TRUE(cross.ok()) << cross.status();
        EXPECT_EQ(cross->num_valid, 6);
        EXPECT_EQ(Positions(cross->keys.narrow(2, 0, 6)),
                  (std::vector<int64_t>{100, 101, 102, 103, 104, 105}));
        EXPECT_TRUE(cache->is_updated(layer));
      }
    }
    EXPECT_EQ(projections, 2) << self_impl;
    EXPECT_EQ(cache->SeqLength(), 4);  // the self-attention cache's
    EXPECT_EQ(cache->cross_attention().SeqLength(), 6);
  }
}

TEST(EncoderDecoderCacheTest, CropConcernsSelfOnlyResetClearsFlags) {
  std::unique_ptr<EncoderDecoderCache> cache = MakePair("dynamic", "dynamic");
  int projections = 0;
  auto project = [&] {
    ++projections;
    return std::make_pair(PositionTensor(0, 3), PositionTensor(0, 3));
  };
  ASSERT_TRUE(cache->UpdateSelf(0, PositionTensor(0, 4), PositionTensor(0, 4)).ok());
  ASSERT_TRUE(cache->CrossAttention(0, project).ok());
  ASSERT_TRUE(cache->Crop(-2).ok());
  EXPECT_EQ(cache->SeqLength(), 2);
  EXPECT_EQ(cache->cross_attention().layer(0).SeqLength(), 3);
  const MemoryUsage m = cache->Memory();
  EXPECT_EQ(m.device_bytes, cache->self_attention().Memory().device_bytes +
                                cache->cross_attention().Memory().device_bytes);
  cache->Reset();
  EXPECT_FALSE(cache->is_updated(0));
  EXPECT_EQ(cache->Memory(), MemoryUsage{});
  ASSERT_TRUE(cache->CrossAttention(0, project).ok());
  EXPECT_EQ(projections, 2);
}

TEST(EncoderDecoderCacheTest, BeamHelpersActOnBothCaches) {
  std::unique_ptr<EncoderDecoderCache> cache = MakePair("dynamic", "static");
  auto project = [] { return std::make_pair(PositionTensor(0, 3, 1), PositionTensor(0, 3, 1)); };
  ASSERT_TRUE(cache->UpdateSelf(0, PositionTensor(0, 2, 1), PositionTensor(0, 2, 1)).ok());
  ASSERT_TRUE(cache->CrossAttention(0, project).ok());
  // A batch-1 prefix feeds 3 beams.
  ASSERT_TRUE(cache->RepeatInterleave(3).ok());
  EXPECT_EQ(cache->self_attention().layer(0).BatchSize(), 3);
  EXPECT_EQ(cache->cross_attention().layer(0).BatchSize(), 3);
  absl::StatusOr<LayerView> cross = cache->CrossAttention(0, project);
  ASSERT_TRUE(cross.ok()) << cross.status();
  EXPECT_EQ(cross->keys.size(0), 3);
  EXPECT_FALSE(cache->Reorder(at::tensor({0, 1}, at::kLong)).ok());  // checked first
  ASSERT_TRUE(cache->Reorder(at::tensor({2, 1, 0}, at::kLong)).ok());
  ASSERT_TRUE(cache->SelectIndices(at::tensor({0}, at::kLong)).ok());
  EXPECT_EQ(cache->cross_attention().layer(0).BatchSize(), 1);
  std::unique_ptr<EncoderDecoderCache> copy = cache->Clone();
  EXPECT_TRUE(copy->is_updated(0));
  EXPECT_EQ(copy->SeqLength(), cache->SeqLength());
  // The static cross cache is copied whole; the dynamic self cache is copied compactly.
  EXPECT_EQ(copy->cross_attention().Memory(), cache->cross_attention().Memory());
}

TEST(EncoderDecoderCacheTest, CreateRefusesMismatchedCaches) {
  EXPECT_FALSE(EncoderDecoderCache::Create(Make("dynamic", 2), Make("dynamic", 3)).ok());
  EXPECT_FALSE(EncoderDecoderCache::Create(Make("dynamic", 2), nullptr).ok());
}

}  // namespace
}  // namespace kvserve::cache
