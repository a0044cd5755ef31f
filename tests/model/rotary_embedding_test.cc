// Tests for RotaryEmbedding: frequency schedules of each rope_scaling type against values
// computed by hand from Transformers' formulas, and the rotation itself.
#include "model/rotary_embedding.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

namespace kvserve::model {
namespace {

ModelConfig Config(int64_t head_dim, RopeScaling scaling = {}) {
  ModelConfig c;
  c.head_dim = head_dim;
  c.rope_theta = 10000.0;
  c.max_position_embeddings = 64;
  c.rope_scaling = scaling;
  return c;
}

at::Tensor Positions(std::vector<int64_t> p) { return at::tensor(p, at::kLong); }

// cos(pos * inv_freq[i]) for the first half of the rotary dims.
float ExpectedCos(int64_t pos, double inv_freq) {
  return static_cast<float>(std::cos(pos * inv_freq));
}

TEST(RotaryEmbeddingTest, DefaultFrequencies) {
  auto rope = RotaryEmbedding::Create(Config(4), at::kFloat, at::kCPU);
  ASSERT_TRUE(rope.ok());
  auto [cos, sin] = rope->CosSin(Positions({0, 3}), 4);
  ASSERT_EQ(cos.sizes(), (std::vector<int64_t>{2, 4}));
  // inv_freq = [1, 1/100] for head_dim 4 and theta 10000; halves are repeated.
  EXPECT_FLOAT_EQ(cos[0][0].item<float>(), 1.0f);
  EXPECT_NEAR(cos[1][0].item<float>(), ExpectedCos(3, 1.0), 1e-6);
  EXPECT_NEAR(cos[1][1].item<float>(), ExpectedCos(3, 0.01), 1e-6);
  EXPECT_NEAR(cos[1][2].item<float>(), ExpectedCos(3, 1.0), 1e-6);
  EXPECT_NEAR(sin[1][3].item<float>(), std::sin(0.03), 1e-6);
}

TEST(RotaryEmbeddingTest, LinearScalingDividesFrequencies) {
  RopeScaling s;
  s.type = RopeScaling::Type::kLinear;
  s.factor = 4.0;
  auto rope = RotaryEmbedding::Create(Config(4, s), at::kFloat, at::kCPU);
  ASSERT_TRUE(rope.ok());
  auto [cos, sin] = rope->CosSin(Positions({8}), 9);
  EXPECT_NEAR(cos[0][0].item<float>(), ExpectedCos(8, 0.25), 1e-6);  // position 8 acts as 2
}

TEST(RotaryEmbeddingTest, Llama3KeepsHighAndScalesLowFrequencies) {
  RopeScaling s;
  s.type = RopeScaling::Type::kLlama3;
  s.factor = 8.0;
  s.low_freq_factor = 1.0;
  s.high_freq_factor = 4.0;
  s.original_max_position_embeddings = 64;
  auto rope = RotaryEmbedding::Create(Config(64, s), at::kFloat, at::kCPU);
  ASSERT_TRUE(rope.ok());
  auto [cos, sin] = rope->CosSin(Positions({5}), 6);
  // Dim 0: inv_freq 1, wavelength 2*pi < 64/4: unchanged.
  EXPECT_NEAR(cos[0][0].item<float>(), ExpectedCos(5, 1.0), 1e-6);
  // Dim 31 (last of the half): inv_freq 10000^(-62/64), wavelength > 64: divided by 8.
  const double low = std::pow(10000.0, -62.0 / 64.0);
  EXPECT_NEAR(sin[0][31].item<float>(), std::sin(5 * low / 8.0), 1e-6);
}

TEST(RotaryEmbeddingTest, YarnScalesCosAndSinByAttentionFactor) {
  RopeScaling s;
  s.type = RopeScaling::Type::kYarn;
  s.factor = 4.0;
  s.original_max_position_embeddings = 16;
  auto rope = RotaryEmbedding::Create(Config(8, s), at::kFloat, at::kCPU);
  ASSERT_TRUE(rope.ok());
  auto [cos, sin] = rope->CosSin(Positions({0}), 1);
  const float scaling = static_cast<float>(0.1 * std::log(4.0) + 1.0);
  EXPECT_NEAR(cos[0][0].item<float>(), scaling, 1e-6);  // cos(0) * attention factor
  EXPECT_NEAR(sin[0][0].item<float>(), 0.0f, 1e-7);
}

TEST(RotaryEmbeddingTest, DynamicChangesOnlyPastTheOriginalContext) {
  RopeScaling s;
  s.type = RopeScaling::Type::kDynamic;
  s.factor = 2.0;
  auto plain = RotaryEmbedding::Create(Config(8), at::kFloat, at::kCPU);
  auto dynamic = RotaryEmbedding::Create(Config(8, s), at::kFloat, at::kCPU);
  ASSERT_TRUE(plain.ok() && dynamic.ok());
  const at::Tensor pos = Positions({10, 20});
  EXPECT_TRUE(at::allclose(plain->CosSin(pos, 64).first, dynamic->CosSin(pos, 64).first));
  // Past 64 tokens the base grows, so the low frequencies rotate more slowly.
  EXPECT_FALSE(at::allclose(plain->CosSin(pos, 100).first, dynamic->CosSin(pos, 100).first));
}

TEST(RotaryEmbeddingTest, PositionsBeyondTheTableAreComputed) {
  auto rope = RotaryEmbedding::Create(Config(4), at::kFloat, at::kCPU);
  ASSERT_TRUE(rope.ok());
  auto [cos, sin] = rope->CosSin(Positions({100}), 101);  // the table holds 64 positions
  EXPECT_NEAR(cos[0][0].item<float>(), ExpectedCos(100, 1.0), 1e-5);
}

TEST(RotaryEmbeddingTest, RotateMatchesRotateHalfAndKeepsNorms) {
  auto rope = RotaryEmbedding::Create(Config(4), at::kFloat, at::kCPU);
  ASSERT_TRUE(rope.ok());
  at::Tensor x = at::tensor({1.0f, 2.0f, 3.0f, 4.0f}).view({1, 1, 4});
  auto [cos, sin] = rope->CosSin(Positions({1}), 2);
  rope->Rotate(x, cos, sin);
  // Pair (x0, x2) rotates by 1 rad; pair (x1, x3) by 0.01 rad.
  EXPECT_NEAR(x[0][0][0].item<float>(), 1 * std::cos(1.0) - 3 * std::sin(1.0), 1e-6);
  EXPECT_NEAR(x[0][0][2].item<float>(), 3 * std::cos(1.0) + 1 * std::sin(1.0), 1e-6);
  EXPECT_NEAR(x[0][0][1].item<float>(), 2 * std::cos(0.01) - 4 * std::sin(0.01), 1e-6);
  const float norm02 = std::hypot(x[0][0][0].item<float>(), x[0][0][2].item<float>());
  EXPECT_NEAR(norm02, std::hypot(1.0f, 3.0f), 1e-5);
}

TEST(RotaryEmbeddingTest, RefusesABadRotaryDimension) {
  ModelConfig c = Config(4);
  c.partial_rotary_factor = 0.25;  // 1 rotary dim: odd
  auto rope = RotaryEmbedding::Create(c, at::kFloat, at::kCPU);
  EXPECT_EQ(rope.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(rope.status().message().find("partial_rotary_factor"), std::string::npos);
}

}  // namespace
}  // namespace kvserve::model
