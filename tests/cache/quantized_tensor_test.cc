// Tests for QuantizedTensor: bit packing, exact packed byte counts, exact crop and reorder.
#include "cache/quantized_tensor.h"

#include <gtest/gtest.h>

#include "cache/hqq_quantizer.h"
#include "cache/quanto_quantizer.h"

namespace kvserve::cache {
namespace {

TEST(BitPackingTest, RoundTripsEveryWidth) {
  at::manual_seed(1);
  for (int nbits = 1; nbits <= 8; ++nbits) {
    const at::Tensor codes = at::randint(0, 1 << nbits, {3, 2, 5, 20}, at::kLong).to(at::kByte);
    const at::Tensor packed = PackBits(codes, nbits);
    // 20 codes per row pad to 24: 3 runs of 8 codes, nbits bytes each.
    EXPECT_EQ(packed.size(-1), nbits == 8 ? 20 : 3 * nbits) << nbits;  // 8 bits: unpacked
    EXPECT_EQ(packed.scalar_type(), at::kByte);
    EXPECT_TRUE(at::equal(UnpackBits(packed, nbits, 20), codes)) << nbits;
  }
}

TEST(BitPackingTest, LayoutIsLittleEndianWithinEachRun) {
  // Codes 1, 2, 3, 0, ... at 4 bits: byte 0 = 1 | 2 << 4, byte 1 = 3.
  at::Tensor codes = at::zeros({8}, at::kByte);
  codes[0] = 1;
  codes[1] = 2;
  codes[2] = 3;
  const at::Tensor packed = PackBits(codes, 4);
  ASSERT_EQ(packed.size(0), 4);
  EXPECT_EQ(packed[0].item<int>(), 0x21);
  EXPECT_EQ(packed[1].item<int>(), 0x03);
}

struct ByteCase {
  int nbits;
  int64_t packed_bytes;
};

TEST(QuantizedTensorTest, ExactPackedByteCounts) {
  // [1, 2, 10, 64] float32, per-token groups of 64: 20 rows, one scale and zero each.
  const at::Tensor x = at::randn({1, 2, 10, 64});
  const int64_t params = 2 * 20 * 4;
  for (ByteCase c : {ByteCase{1, 20 * 8}, ByteCase{2, 20 * 16}, ByteCase{3, 20 * 24},
                     ByteCase{4, 20 * 32}, ByteCase{8, 20 * 64}}) {
    absl::StatusOr<QuantizedTensor> q = HqqQuantizer(c.nbits, 1, 64).Quantize(x);
    ASSERT_TRUE(q.ok());
    EXPECT_EQ(q->packed_bytes(), c.packed_bytes) << c.nbits;
    EXPECT_EQ(q->bytes(), c.packed_bytes + params) << c.nbits;
  }
  // int4 is 4 bits per value: half a byte for each of the 1280 values.
  absl::StatusOr<QuantizedTensor> q4 = QuantoQuantizer(4, 0, 64).Quantize(x);
  EXPECT_EQ(q4->packed_bytes(), 1280 / 2);
  // Per-channel groups of 4 tokens: ceil(10 / 4) = 3 groups per channel, 2 * 3 * 64 each.
  absl::StatusOr<QuantizedTensor> qc = QuantoQuantizer(2, -1, 4).Quantize(x);
  ASSERT_TRUE(qc.ok());
  EXPECT_EQ(qc->bytes(), 20 * 16 + 2 * (2 * 3 * 64) * 4);
}

TEST(QuantizedTensorTest, TruncateIsExact) {
  const at::Tensor x = at::randn({2, 2, 10, 16});
  for (int axis : {0, -1}) {
    QuantizedTensor q = *QuantoQuantizer(4, axis, 4).Quantize(x);
    const at::Tensor before = q.Dequantize();
    q.Truncate(7);
    EXPECT_EQ(q.seq_len(), 7);
    EXPECT_TRUE(at::equal(q.Dequantize(), before.narrow(2, 0, 7))) << axis;
  }
}

TEST(QuantizedTensorTest, SelectAndRepeatBatchAreExact) {
  const at::Tensor x = at::randn({3, 2, 5, 16});
  QuantizedTensor q = *HqqQuantizer(2, 0, 4).Quantize(x);
  const at::Tensor before = q.Dequantize();
  QuantizedTensor copy = q.Clone();
  q.SelectBatch(at::tensor({2, 0}, at::kLong));
  EXPECT_TRUE(at::equal(q.Dequantize(), before.index_select(0, at::tensor({2, 0}, at::kLong))));
  copy.RepeatInterleaveBatch(2);
  EXPECT_EQ(copy.batch_size(), 6);
  EXPECT_TRUE(at::equal(copy.Dequantize(), before.repeat_interleave(2, 0)));
}

}  // namespace
}  // namespace kvserve::cache
