// Tests for layer type names and layer spec validation.
#include "cache/layer_type.h"

#include <gtest/gtest.h>

#include "cache/kv_cache.h"

namespace kvserve::cache {
namespace {

TEST(LayerTypeTest, NamesRoundTrip) {
  for (LayerType t :
       {LayerType::kFullAttention, LayerType::kSlidingAttention, LayerType::kChunkedAttention}) {
    auto parsed = ParseLayerType(LayerTypeName(t));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, t);
  }
  EXPECT_STREQ(LayerTypeName(LayerType::kSlidingAttention), "sliding_attention");
}

TEST(LayerTypeTest, UnknownNameListsTheSupportedOnes) {
  auto parsed = ParseLayerType("linear_attention");
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(parsed.status().message().find("linear_attention"), std::string::npos);
  EXPECT_NE(parsed.status().message().find("chunked_attention"), std::string::npos);
}

TEST(LayerTypeTest, SpecValidation) {
  EXPECT_TRUE(ValidateLayerSpec({LayerType::kFullAttention, 0}, 0).ok());
  EXPECT_TRUE(ValidateLayerSpec({LayerType::kChunkedAttention, 2}, 0).ok());
  EXPECT_FALSE(ValidateLayerSpec({LayerType::kSlidingAttention, 0}, 3).ok());
  EXPECT_TRUE((LayerSpec{LayerType::kChunkedAttention, 8}).is_sliding());
  EXPECT_FALSE((LayerSpec{LayerType::kFullAttention, 0}).is_sliding());
}

}  // namespace
}  // namespace kvserve::cache
