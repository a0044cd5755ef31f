// Tests for MakeCache: layer classes per spec and layer type, and refusals.
#include "cache/cache_factory.h"

#include <gtest/gtest.h>

#include "cache/dynamic_layer.h"
#include "cache/dynamic_sliding_window_layer.h"
#include "cache/fp8_layer.h"
#include "cache/offloaded_layer.h"
#include "cache/quantized_layer.h"
#include "cache/static_layer.h"
#include "cache/static_sliding_window_layer.h"

namespace kvserve::cache {
namespace {

const std::vector<LayerSpec> kMixed = {
    {}, {LayerType::kSlidingAttention, 4}, {LayerType::kChunkedAttention, 8}};

std::unique_ptr<KvCache> Make(std::string_view impl, const std::vector<LayerSpec>& layers,
                              const QuantizationConfig& config = {}) {
  absl::StatusOr<CacheSpec> spec = CacheSpec::Parse(impl, config, true, 32);
  EXPECT_TRUE(spec.ok()) << spec.status();
  absl::StatusOr<std::unique_ptr<KvCache>> cache = MakeCache(*spec, layers);
  EXPECT_TRUE(cache.ok()) << cache.status();
  return cache.ok() ? std::move(*cache) : nullptr;
}

template <typename T>
bool Is(const CacheLayer& layer) {
  return dynamic_cast<const T*>(&layer) != nullptr;
}

const CacheLayer& Inner(const CacheLayer& layer) {
  const auto* off = dynamic_cast<const OffloadedLayer*>(&layer);
  return off ? off->inner() : layer;
}

TEST(CacheFactoryTest, DynamicAndStaticLayerClasses) {
  std::unique_ptr<KvCache> dyn = Make("dynamic", kMixed);
  EXPECT_TRUE(Is<DynamicLayer>(dyn->layer(0)));
  EXPECT_TRUE(Is<DynamicSlidingWindowLayer>(dyn->layer(1)));
  EXPECT_TRUE(Is<DynamicSlidingWindowLayer>(dyn->layer(2)));
  std::unique_ptr<KvCache> st = Make("static", kMixed);
  EXPECT_TRUE(Is<StaticLayer>(st->layer(0)));
  EXPECT_TRUE(Is<StaticSlidingWindowLayer>(st->layer(1)));
  EXPECT_EQ(st->layer(0).MaxLength(), 32);
  EXPECT_EQ(st->layer(1).MaxLength(), 4);
  EXPECT_EQ(st->layer(2).MaxLength(), 8);
  EXPECT_EQ(st->layer(2).type(), LayerType::kChunkedAttention);
}

TEST(CacheFactoryTest, OffloadedWrapsTheRightLayers) {
  std::unique_ptr<KvCache> off = Make("offloaded", kMixed);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(off->layer(i).offloaded()) << i;
  EXPECT_TRUE(Is<DynamicSlidingWindowLayer>(Inner(off->layer(1))));
  std::unique_ptr<KvCache> off_static = Make("offloaded_static", kMixed);
  EXPECT_TRUE(off_static->layer(0).offloaded());
  EXPECT_TRUE(Is<StaticLayer>(Inner(off_static->layer(0))));
  EXPECT_FALSE(off_static->layer(1).offloaded());
  EXPECT_TRUE(Is<StaticSlidingWindowLayer>(off_static->layer(1)));
}

TEST(CacheFactoryTest, QuantizedBackends) {
  std::unique_ptr<KvCache> quanto = Make("quantized", {{}, {}});
  EXPECT_TRUE(Is<QuantizedLayer>(quanto->layer(1)));
  std::unique_ptr<KvCache> hqq = Make("quantized", {{}}, {.backend = "hqq", .nbits = 8});
  EXPECT_TRUE(Is<QuantizedLayer>(hqq->layer(0)));
  std::unique_ptr<KvCache> fp8 = Make("quantized", {{}}, {.backend = "fp8"});
  EXPECT_TRUE(Is<Fp8Layer>(fp8->layer(0)));
}

TEST(CacheFactoryTest, QuantizedRefusesSlidingLayers) {
  absl::StatusOr<std::unique_ptr<KvCache>> cache =
      MakeCache(*CacheSpec::Parse("quantized"), kMixed);
  EXPECT_EQ(cache.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(cache.status().message().find("layer 1 is sliding_attention"), std::string::npos);
}

TEST(CacheFactoryTest, StaticNeedsMaxCacheLen) {
  absl::StatusOr<std::unique_ptr<KvCache>> cache = MakeCache(*CacheSpec::Parse("static"), kMixed);
  EXPECT_EQ(cache.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(cache.status().message().find("max_cache_len"), std::string::npos);
}

TEST(CacheFactoryTest, NoCacheIsNull) {
  absl::StatusOr<std::unique_ptr<KvCache>> cache =
      MakeCache(*CacheSpec::Parse("", {}, /*use_cache=*/false), kMixed);
  ASSERT_TRUE(cache.ok());
  EXPECT_EQ(*cache, nullptr);
}

TEST(CacheFactoryTest, InvalidWindowIsRefused) {
  EXPECT_FALSE(
      MakeCache(*CacheSpec::Parse("static", {}, true, 8), {{LayerType::kSlidingAttention, 1}})
          .ok());
}

TEST(CacheFactoryTest, EncoderDecoderCacheAsGenerate) {
  const std::vector<LayerSpec> layers(2);
  auto dyn = MakeEncoderDecoderCache(*CacheSpec::Parse("dynamic"), layers, 7);
  ASSERT_TRUE(dyn.ok());
  EXPECT_TRUE(Is<DynamicLayer>((*dyn)->cross_attention().layer(1)));
  auto st = MakeEncoderDecoderCache(*CacheSpec::Parse("offloaded_static", {}, true, 32), layers, 7);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ((*st)->self_attention().layer(0).MaxLength(), 32);
  EXPECT_EQ((*st)->cross_attention().layer(0).MaxLength(), 7);
  EXPECT_TRUE((*st)->cross_attention().layer(0).offloaded());
  auto quantized = MakeEncoderDecoderCache(*CacheSpec::Parse("quantized"), layers, 7);
  EXPECT_EQ(quantized.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(quantized.status().message().find("encoder-decoder"), std::string::npos);
  auto none = MakeEncoderDecoderCache(*CacheSpec::Parse("", {}, false), layers, 7);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, nullptr);
}

TEST(CacheFactoryTest, StaticCacheLengthAsGenerate) {
  EXPECT_EQ(StaticCacheLength(20, std::nullopt), 19);
  EXPECT_EQ(StaticCacheLength(20, 64), 64);
}

TEST(CacheFactoryTest, CheckSpecForModelRefusesWhatTheFirstStepWouldFailOn) {
  const std::vector<LayerSpec> full = {{}, {}};
  auto spec = [](const QuantizationConfig& config) {
    absl::StatusOr<CacheSpec> s = CacheSpec::Parse("quantized", config);
    EXPECT_TRUE(s.ok()) << s.status();
    return *s;
  };
  // Quanto groups per token along axis 0: the group must divide head_dim, or cover it.
  absl::Status s = CheckSpecForModel(spec({.q_group_size = 3}), full, 16);
  EXPECT_EQ(s.message(),
            "cache_config.q_group_size 3 does not divide head_dim 16; allowed for per-token "
            "grouping: a divisor of head_dim, or >= head_dim");
  EXPECT_TRUE(CheckSpecForModel(spec({.q_group_size = 8}), full, 16).ok());
  EXPECT_TRUE(CheckSpecForModel(spec({.q_group_size = 64}), full, 16).ok());
  // Per-channel grouping (quanto axis -1) runs over tokens, so any group fits.
  EXPECT_TRUE(
      CheckSpecForModel(spec({.axis_key = -1, .axis_value = -1, .q_group_size = 3}), full, 16)
          .ok());
  // HQQ groups per token along axis 1.
  EXPECT_FALSE(
      CheckSpecForModel(spec({.backend = "hqq", .axis_key = 1, .q_group_size = 3}), full, 16).ok());
  EXPECT_TRUE(CheckSpecForModel(spec({.backend = "hqq", .q_group_size = 3}), full, 16).ok());
  EXPECT_TRUE(CheckSpecForModel(spec({.backend = "fp8"}), full, 16).ok());
  // Sliding and chunked layers refuse quantized caches, and only quantized ones.
  EXPECT_EQ(CheckSpecForModel(spec({}), kMixed, 16).message(),
            "cache_implementation 'quantized' supports only full_attention layers; layer 1 is "
            "sliding_attention");
  EXPECT_TRUE(CheckSpecForModel(*CacheSpec::Parse("static", {}, true, 8), kMixed, 16).ok());
}

}  // namespace
}  // namespace kvserve::cache
