// Tests for QuantizedLayer: exact prefill, the reference's flush schedule, both stores in
// crop/reorder (a deliberate fix of the reference), memory.
#include "cache/quantized_layer.h"

#include <gtest/gtest.h>

#include "cache/hqq_quantizer.h"
#include "cache/quanto_quantizer.h"
#include "tests/cache/test_tensors.h"

namespace kvserve::cache {
namespace {

using testing::PositionTensor;

std::unique_ptr<QuantizedLayer> Quanto(int64_t residual_length, int nbits = 4) {
  return std::make_unique<QuantizedLayer>(std::make_shared<QuantoQuantizer>(nbits, 0, 64),
                                          std::make_shared<QuantoQuantizer>(nbits, 0, 64),
                                          residual_length);
}

TEST(QuantizedLayerTest, PrefillIsQuantizedButReturnedExactly) {
  auto layer = Quanto(128);
  const at::Tensor k = at::randn({1, 2, 5, 16});
  const at::Tensor v = at::randn({1, 2, 5, 16});
  absl::StatusOr<LayerView> view = layer->Update(k, v);
  ASSERT_TRUE(view.ok());
  EXPECT_TRUE(at::equal(view->keys, k));
  EXPECT_TRUE(at::equal(view->values, v));
  EXPECT_EQ(layer->num_quantized_tokens(), 5);
  EXPECT_EQ(layer->num_residual_tokens(), 0);
  EXPECT_EQ(layer->SeqLength(), 5);
  EXPECT_EQ(layer->MaxLength(), -1);
}

// One token per step after a P-token prefill: the residual holds N mod max(R, 2) tokens.
void ExpectFlushSchedule(int64_t residual_length) {
  auto layer = Quanto(residual_length);
  ASSERT_TRUE(layer->Update(at::randn({1, 2, 5, 16}), at::randn({1, 2, 5, 16})).ok());
  const int64_t period = std::max<int64_t>(residual_length, 2);
  for (int64_t step = 1; step <= 3 * period + 1; ++step) {
    absl::StatusOr<LayerView> view =
        layer->Update(at::randn({1, 2, 1, 16}), at::randn({1, 2, 1, 16}));
    ASSERT_TRUE(view.ok());
    EXPECT_EQ(view->num_valid, 5 + step);
    EXPECT_EQ(view->keys.size(2), 5 + step);
    EXPECT_EQ(layer->num_residual_tokens(), step % period)
        << "R=" << residual_length << " step " << step;
    EXPECT_EQ(layer->num_quantized_tokens(), 5 + step - step % period);
  }
}

TEST(QuantizedLayerTest, FlushScheduleMatchesReference) {
  for (int64_t r : {0, 1, 2, 3, 4, 7}) ExpectFlushSchedule(r);
}

TEST(QuantizedLayerTest, MultiTokenUpdatesAppendWithoutSizeCheck) {
  auto layer = Quanto(2);
  ASSERT_TRUE(layer->Update(at::randn({1, 1, 3, 16}), at::randn({1, 1, 3, 16})).ok());
  ASSERT_TRUE(layer->Update(at::randn({1, 1, 5, 16}), at::randn({1, 1, 5, 16})).ok());
  EXPECT_EQ(layer->num_residual_tokens(), 5);  // beyond residual_length
  ASSERT_TRUE(layer->Update(at::randn({1, 1, 1, 16}), at::randn({1, 1, 1, 16})).ok());
  EXPECT_EQ(layer->num_residual_tokens(), 0);
  EXPECT_EQ(layer->num_quantized_tokens(), 9);
}

TEST(QuantizedLayerTest, ReturnsDequantizedPastThenResidualThenNew) {
  auto layer = Quanto(8);
  const at::Tensor prefill = at::randn({1, 2, 4, 16});
  ASSERT_TRUE(layer->Update(prefill, prefill).ok());
  const at::Tensor deq = layer->quantized_keys().Dequantize();
  const at::Tensor t1 = at::randn({1, 2, 1, 16});
  const at::Tensor t2 = at::randn({1, 2, 1, 16});
  ASSERT_TRUE(layer->Update(t1, t1).ok());
  absl::StatusOr<LayerView> view = layer->Update(t2, t2);
  ASSERT_TRUE(view.ok());
  EXPECT_TRUE(at::equal(view->keys, at::cat({deq, t1, t2}, 2)));
  EXPECT_GT((deq - prefill).abs().max().item<float>(), 0);  // really quantized
}

TEST(QuantizedLayerTest, ZeroTokenUpdateIsARead) {
  auto layer = Quanto(2);
  ASSERT_TRUE(layer->Update(at::randn({1, 1, 3, 16}), at::randn({1, 1, 3, 16})).ok());
  ASSERT_TRUE(layer->Update(at::randn({1, 1, 1, 16}), at::randn({1, 1, 1, 16})).ok());
  absl::StatusOr<LayerView> view =
      layer->Update(at::empty({1, 1, 0, 16}), at::empty({1, 1, 0, 16}));
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->num_valid, 4);
  EXPECT_EQ(layer->num_residual_tokens(), 1);  // no flush
}

// Deliberate divergence from the reference, whose crop touches only the residual (and
// keeps the length): here both stores are cropped and SeqLength follows.
TEST(QuantizedLayerTest, CropActsOnBothStores) {
  auto layer = Quanto(128);
  ASSERT_TRUE(layer->Update(at::randn({1, 2, 6, 16}), at::randn({1, 2, 6, 16})).ok());
  ASSERT_TRUE(layer->Update(at::randn({1, 2, 2, 16}), at::randn({1, 2, 2, 16})).ok());
  const at::Tensor before = layer->quantized_keys().Dequantize();
  ASSERT_TRUE(layer->Crop(-1).ok());
  EXPECT_EQ(layer->num_residual_tokens(), 1);
  EXPECT_EQ(layer->num_quantized_tokens(), 6);
  ASSERT_TRUE(layer->Crop(-3).ok());
  EXPECT_EQ(layer->num_residual_tokens(), 0);
  EXPECT_EQ(layer->num_quantized_tokens(), 4);
  EXPECT_EQ(layer->SeqLength(), 4);
  EXPECT_TRUE(at::equal(layer->quantized_keys().Dequantize(), before.narrow(2, 0, 4)));
  absl::StatusOr<LayerView> view =
      layer->Update(at::randn({1, 2, 1, 16}), at::randn({1, 2, 1, 16}));
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->num_valid, 5);
}

// Deliberate divergence from the reference (#45510, #48700): beam reorders reorder the
// quantized tokens too, so every row keeps its own history.
TEST(QuantizedLayerTest, ReorderActsOnBothStores) {
  auto layer = Quanto(128);
  // Row r holds values 1000 * r + position, in the quantized part and in the residual.
  ASSERT_TRUE(layer->Update(PositionTensor(0, 4, 2, 2, 16), PositionTensor(0, 4, 2, 2, 16)).ok());
  ASSERT_TRUE(layer->Update(PositionTensor(4, 1, 2, 2, 16), PositionTensor(4, 1, 2, 2, 16)).ok());
  ASSERT_TRUE(layer->Reorder(at::tensor({1, 1}, at::kLong)).ok());
  absl::StatusOr<LayerView> view =
      layer->Update(at::empty({2, 2, 0, 16}), at::empty({2, 2, 0, 16}));
  ASSERT_TRUE(view.ok());
  const at::Tensor row0 = view->keys.select(0, 0).select(0, 0).select(1, 0);
  // Both rows now hold row 1's tokens, in both stores (per-token int4 of a constant row
  // is exact).
  EXPECT_TRUE(at::allclose(row0, at::arange(0, 5, at::kFloat) + 1000));
  ASSERT_TRUE(layer->SelectIndices(at::tensor({0}, at::kLong)).ok());
  EXPECT_EQ(layer->BatchSize(), 1);
  ASSERT_TRUE(layer->RepeatInterleave(3).ok());
  EXPECT_EQ(layer->BatchSize(), 3);
  view = layer->Update(at::randn({3, 2, 1, 16}), at::randn({3, 2, 1, 16}));
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->keys.size(0), 3);
}

TEST(QuantizedLayerTest, MemoryCountsPackedCodesParamsAndResidual) {
  auto layer = Quanto(128);
  ASSERT_TRUE(layer->Update(at::randn({1, 2, 8, 64}), at::randn({1, 2, 8, 64})).ok());
  // Per tensor: 16 rows * 32 bytes of int4 codes + 16 rows * (scale + zero) * 4 bytes.
  EXPECT_EQ(layer->Memory(), MemoryUsage{.device_bytes = 2 * (16 * 32 + 16 * 2 * 4)});
  ASSERT_TRUE(layer->Update(at::randn({1, 2, 1, 64}), at::randn({1, 2, 1, 64})).ok());
  // Plus the residual buffer: 64 token slots of float32 keys and values.
  EXPECT_EQ(layer->Memory().device_bytes, 2 * (16 * 32 + 16 * 2 * 4) + 2 * 2 * 64 * 64 * 4);
}

TEST(QuantizedLayerTest, CloneIsDeepAndResetEmpties) {
  auto layer = std::make_unique<QuantizedLayer>(std::make_shared<HqqQuantizer>(8, 1, 16),
                                                std::make_shared<HqqQuantizer>(8, 0, 16), 4);
  ASSERT_TRUE(layer->Update(at::randn({1, 2, 6, 16}), at::randn({1, 2, 6, 16})).ok());
  ASSERT_TRUE(layer->Update(at::randn({1, 2, 1, 16}), at::randn({1, 2, 1, 16})).ok());
  std::unique_ptr<CacheLayer> copy = layer->Clone();
  layer->Reset();
  EXPECT_EQ(layer->SeqLength(), 0);
  EXPECT_EQ(layer->Memory(), MemoryUsage{});
  EXPECT_EQ(copy->SeqLength(), 7);
  absl::StatusOr<LayerView> view = copy->Update(at::randn({1, 2, 1, 16}), at::randn({1, 2, 1, 16}));
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->num_valid, 8);
}

TEST(QuantizedLayerTest, RejectsMismatchedUpdates) {
  auto layer = Quanto(4);
  ASSERT_TRUE(layer->Update(at::randn({1, 2, 3, 16}), at::randn({1, 2, 3, 16})).ok());
  EXPECT_FALSE(layer->Update(at::randn({2, 2, 1, 16}), at::randn({2, 2, 1, 16})).ok());
  EXPECT_FALSE(layer->Update(at::randn({1, 2, 1, 8}), at::randn({1, 2, 1, 8})).ok());
  EXPECT_EQ(layer->SeqLength(), 3);
}

}  // namespace
}  // namespace kvserve::cache
