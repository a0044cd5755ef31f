// Tests for Fp8Layer: per-tensor scales fixed at the first update, no residual, 1 byte/value.
#include "cache/fp8_layer.h"

#include <gtest/gtest.h>

#include "cache/fp8_codec.h"

namespace kvserve::cache {
namespace {

TEST(Fp8LayerTest, CalibratesOnceAndAppendsEveryToken) {
  Fp8Layer layer;
  at::Tensor k = at::randn({1, 2, 5, 16});
  k[0][0][0][0] = 8.96f;  // amax, so the key scale is 8.96 / 448 = 0.02
  const at::Tensor v = at::randn({1, 2, 5, 16});
  absl::StatusOr<LayerView> view = layer.Update(k, v);
  ASSERT_TRUE(view.ok());
  EXPECT_TRUE(at::equal(view->keys, k));  // the current tokens are exact
  EXPECT_NEAR(layer.key_scale(), 0.02, 1e-7);
  EXPECT_NEAR(layer.value_scale(), v.abs().max().item<double>() / 448, 1e-7);

  const at::Tensor k2 = at::randn({1, 2, 1, 16}) * 100;  // beyond range: saturates later
  view = layer.Update(k2, k2);
  ASSERT_TRUE(view.ok());
  EXPECT_NEAR(layer.key_scale(), 0.02, 1e-7);  // fixed
  EXPECT_EQ(view->num_valid, 6);
  EXPECT_TRUE(at::equal(view->keys.narrow(2, 5, 1), k2));
  const at::Tensor past = view->keys.narrow(2, 0, 5);
  const at::Tensor expected = DecodeE4m3(EncodeE4m3(k / layer.key_scale())) * layer.key_scale();
  EXPECT_TRUE(at::allclose(past, expected));
  EXPECT_LE(((past - k).abs() - k.abs() / 16).max().item<float>(), 1e-3);

  view = layer.Update(at::zeros({1, 2, 1, 16}), at::zeros({1, 2, 1, 16}));
  ASSERT_TRUE(view.ok());
  EXPECT_LE(view->keys.narrow(2, 5, 1).abs().max().item<float>(), 448 * 0.02 + 1e-4);
  EXPECT_EQ(layer.SeqLength(), 7);
}

TEST(Fp8LayerTest, MemoryIsOneBytePerValue) {
  Fp8Layer layer;
  ASSERT_TRUE(layer.Update(at::randn({1, 4, 10, 64}), at::randn({1, 4, 10, 64})).ok());
  // KvBuffer capacity rounds up to 64 tokens: 2 tensors * 4 heads * 64 slots * 64 bytes.
  EXPECT_EQ(layer.Memory(), MemoryUsage{.device_bytes = 2 * 4 * 64 * 64});
}

TEST(Fp8LayerTest, CropAndBeamHelpers) {
  Fp8Layer layer;
  at::Tensor k = at::arange(2, at::kFloat).view({2, 1, 1, 1}).expand({2, 2, 4, 8}).contiguous();
  ASSERT_TRUE(layer.Update(k, k).ok());
  ASSERT_TRUE(layer.Crop(-1).ok());
  EXPECT_EQ(layer.SeqLength(), 3);
  ASSERT_TRUE(layer.Reorder(at::tensor({1, 1}, at::kLong)).ok());
  absl::StatusOr<LayerView> view = layer.Update(at::zeros({2, 2, 1, 8}), at::zeros({2, 2, 1, 8}));
  ASSERT_TRUE(view.ok());
  EXPECT_NEAR(view->keys[0][0][0][0].item<float>(), 1.0f, 1e-6);
  ASSERT_TRUE(layer.SelectIndices(at::tensor({0}, at::kLong)).ok());
  ASSERT_TRUE(layer.RepeatInterleave(2).ok());
  EXPECT_EQ(layer.BatchSize(), 2);
  std::unique_ptr<CacheLayer> copy = layer.Clone();
  layer.Reset();
  EXPECT_EQ(layer.Memory(), MemoryUsage{});
  EXPECT_EQ(copy->SeqLength(), 4);
}

TEST(Fp8LayerTest, RejectsDtypeChangeAndIntegerInputs) {
  Fp8Layer layer;
  EXPECT_FALSE(
      layer.Update(at::ones({1, 1, 1, 4}, at::kLong), at::ones({1, 1, 1, 4}, at::kLong)).ok());
  ASSERT_TRUE(layer.Update(at::ones({1, 1, 1, 4}), at::ones({1, 1, 1, 4})).ok());
  EXPECT_FALSE(
      layer.Update(at::ones({1, 1, 1, 4}, at::kDouble), at::ones({1, 1, 1, 4}, at::kDouble)).ok());
}

}  // namespace
}  // namespace kvserve::cache
