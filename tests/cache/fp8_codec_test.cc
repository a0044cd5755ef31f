// Tests for the float8 e4m3fn codec (kvserve's own, and the native one from LibTorch 2.1).
#include "cache/fp8_codec.h"

#include <gtest/gtest.h>

#include "cache/torch_compat.h"

namespace kvserve::cache {
namespace {

TEST(Fp8CodecTest, EveryFiniteCodeRoundTrips) {
  at::Tensor codes = at::arange(256, at::kLong).to(at::kByte);
  const at::Tensor values = DecodeE4m3(codes);
  const at::Tensor again = EncodeE4m3(values);
  for (int c = 0; c < 256; ++c) {
    if (c == 0x7F || c == 0xFF || c == 0x80) continue;  // NaN, NaN, -0
    EXPECT_EQ(again[c].item<int>(), c) << c;
  }
}

TEST(Fp8CodecTest, KnownValues) {
  const at::Tensor x =
      at::tensor({1.0f, 448.0f, -2.0f, 0.001953125f /* 2^-9 */, 0.015625f /* 2^-6 */, 0.0f});
  const at::Tensor c = EncodeE4m3(x);
  EXPECT_EQ(c[0].item<int>(), 0x38);
  EXPECT_EQ(c[1].item<int>(), 0x7E);
  EXPECT_EQ(c[2].item<int>(), 0xC0);
  EXPECT_EQ(c[3].item<int>(), 0x01);
  EXPECT_EQ(c[4].item<int>(), 0x08);
  EXPECT_EQ(c[5].item<int>(), 0x00);
}

TEST(Fp8CodecTest, RoundsToNearestEvenAndSaturates) {
  const at::Tensor x = at::tensor({1.0625f, 1.1875f, 1.07f, 1000.0f, -1e9f, NAN});
  const at::Tensor d = DecodeE4m3(EncodeE4m3(x));
  EXPECT_EQ(d[0].item<float>(), 1.0f);   // tie, even mantissa 0
  EXPECT_EQ(d[1].item<float>(), 1.25f);  // tie, even mantissa 2
  EXPECT_EQ(d[2].item<float>(), 1.125f);
  EXPECT_EQ(d[3].item<float>(), 448.0f);
  EXPECT_EQ(d[4].item<float>(), -448.0f);
  EXPECT_TRUE(std::isnan(d[5].item<float>()));
}

TEST(Fp8CodecTest, RelativeErrorIsAtMostHalfAMantissaStep) {
  at::manual_seed(6);
  const at::Tensor x = at::randn({4096}) * 10;
  const at::Tensor normal = x.abs() > 0.02;
  const at::Tensor rel = ((DecodeE4m3(EncodeE4m3(x)) - x).abs() / x.abs()).masked_select(normal);
  EXPECT_LE(rel.max().item<float>(), 1.0f / 16 + 1e-6);
}

TEST(Fp8CodecTest, StorageIsOneBytePerValueAndDecodesLikeTheCodec) {
  const at::Tensor x = at::randn({3, 7}) * 50;
  const at::Tensor stored = ToFp8Storage(x);
  EXPECT_EQ(stored.element_size(), 1);
  EXPECT_TRUE(at::equal(FromFp8Storage(stored), DecodeE4m3(EncodeE4m3(x))));
}

}  // namespace
}  // namespace kvserve::cache
