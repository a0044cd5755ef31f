// MambaStateLayer: fixed-size states that are replaced, never cropped, reordered by row.
#include "cache/mamba_state_layer.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <memory>

namespace kvserve::cache {
namespace mamba_state_layer_test {

constexpr int64_t kInner = 4;
constexpr int64_t kKernelMinusOne = 3;
constexpr int64_t kState = 2;

// Row r of both states holds the value r + offset everywhere.
void SetRows(MambaStateLayer& layer, int64_t batch, float offset, int64_t added_tokens) {
  at::Tensor rows = at::arange(batch, at::kFloat).add(offset);
  layer.SetStates(rows.view({batch, 1, 1}).expand({batch, kInner, kKernelMinusOne}).clone(),
                  rows.view({batch, 1, 1}).expand({batch, kInner, kState}).clone(), added_tokens);
}

float RowValue(const at::Tensor& t, int64_t row) { return t[row][0][0].item<float>(); }

TEST(MambaStateLayerTest, KeysAndValuesAreRefused) {
  MambaStateLayer layer;
  auto kv = at::zeros({1, 1, 2, 8});
  EXPECT_EQ(layer.Update(kv, kv).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(MambaStateLayerTest, StatesCountTokensAndKeepAFixedSize) {
  MambaStateLayer layer;
  EXPECT_EQ(layer.BatchSize(), 0);
  EXPECT_EQ(layer.Memory().device_bytes, 0);
  SetRows(layer, 2, 0.0f, 5);
  const int64_t bytes = layer.Memory().device_bytes;
  EXPECT_EQ(bytes, 2 * kInner * (kKernelMinusOne + kState) * 4);
  SetRows(layer, 2, 1.0f, 7);
  EXPECT_EQ(layer.SeqLength(), 12);
  EXPECT_EQ(layer.Memory().device_bytes, bytes);  // whatever the number of tokens
  EXPECT_EQ(layer.MaxLength(), -1);
  EXPECT_EQ(layer.type(), LayerType::kMambaState);
}

TEST(MambaStateLayerTest, ACropThatDropsTokensIsRefusedAndOneThatKeepsThemIsNot) {
  MambaStateLayer layer;
  SetRows(layer, 1, 0.0f, 10);
  EXPECT_TRUE(layer.Crop(0).ok());
  EXPECT_TRUE(layer.Crop(10).ok());
  EXPECT_TRUE(layer.Crop(20).ok());
  for (int64_t n : {-1, 3, 9}) {
    absl::Status s = layer.Crop(n);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << n;
    EXPECT_NE(s.message().find("cannot be cropped"), std::string::npos) << s;
  }
  EXPECT_EQ(layer.SeqLength(), 10);
}

TEST(MambaStateLayerTest, BeamsReorderSelectAndRepeatRows) {
  MambaStateLayer layer;
  SetRows(layer, 3, 0.0f, 4);  // rows 0, 1, 2
  ASSERT_TRUE(layer.Reorder(at::tensor({2, 2, 0}, at::kLong)).ok());
  EXPECT_EQ(RowValue(layer.conv_state(), 0), 2.0f);
  EXPECT_EQ(RowValue(layer.ssm_state(), 1), 2.0f);
  EXPECT_EQ(RowValue(layer.ssm_state(), 2), 0.0f);
  ASSERT_TRUE(layer.SelectIndices(at::tensor({2}, at::kLong)).ok());
  EXPECT_EQ(layer.BatchSize(), 1);
  EXPECT_EQ(RowValue(layer.conv_state(), 0), 0.0f);
  ASSERT_TRUE(layer.RepeatInterleave(3).ok());
  EXPECT_EQ(layer.BatchSize(), 3);
  EXPECT_EQ(layer.RepeatInterleave(0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(layer.Reorder(at::tensor({5}, at::kLong)).ok());  // a row it does not have
}

TEST(MambaStateLayerTest, ARollbackPointRestoresTheStatesAfterNewOnesReplacedThem) {
  MambaStateLayer layer;
  SetRows(layer, 2, 0.0f, 6);
  std::unique_ptr<CacheLayer> point = layer.RollbackPoint();
  SetRows(layer, 2, 10.0f, 2);
  EXPECT_EQ(RowValue(layer.conv_state(), 1), 11.0f);
  layer.RestoreRollbackPoint(std::move(point));
  EXPECT_EQ(layer.SeqLength(), 6);
  EXPECT_EQ(RowValue(layer.conv_state(), 1), 1.0f);
  EXPECT_EQ(RowValue(layer.ssm_state(), 0), 0.0f);
}

TEST(MambaStateLayerTest, ACloneIsIndependentAndResetEmpties) {
  MambaStateLayer layer;
  SetRows(layer, 1, 3.0f, 2);
  std::unique_ptr<CacheLayer> clone = layer.Clone();
  SetRows(layer, 1, 7.0f, 1);
  auto* copy = static_cast<MambaStateLayer*>(clone.get());
  EXPECT_EQ(copy->SeqLength(), 2);
  EXPECT_EQ(RowValue(copy->conv_state(), 0), 3.0f);
  layer.Reset();
  EXPECT_EQ(layer.SeqLength(), 0);
  EXPECT_EQ(layer.BatchSize(), 0);
}

}  // namespace mamba_state_layer_test
}  // namespace kvserve::cache
