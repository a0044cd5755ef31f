// Tests for KvBuffer: growth in steps, front drops, compaction, batch ops, exact bytes.
#include "cache/kv_buffer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/cache/test_tensors.h"

namespace kvserve::cache {
namespace {

using ::testing::ElementsAre;
using testing::Positions;
using testing::PositionTensor;

TEST(KvBufferTest, GrowsInGranulesAndKeepsOrder) {
  KvBuffer buffer;
  EXPECT_FALSE(buffer.defined());
  EXPECT_EQ(buffer.bytes(), 0);
  buffer.Append(PositionTensor(0, 3), PositionTensor(0, 3));
  EXPECT_EQ(buffer.size(), 3);
  EXPECT_EQ(buffer.capacity(), KvBuffer::kGranuleTokens);
  // 2 tensors * batch 1 * heads 2 * 64 tokens * dim 4 * 4 bytes.
  EXPECT_EQ(buffer.bytes(), 2 * 2 * 64 * 4 * 4);
  for (int64_t t = 3; t < 70; ++t) buffer.Append(PositionTensor(t, 1), PositionTensor(t, 1));
  EXPECT_EQ(buffer.size(), 70);
  EXPECT_EQ(buffer.capacity(), 128);
  std::vector<int64_t> expected(70);
  for (int64_t i = 0; i < 70; ++i) expected[i] = i;
  EXPECT_EQ(Positions(buffer.keys()), expected);
  EXPECT_EQ(Positions(buffer.values()), expected);
}

TEST(KvBufferTest, DropFrontThenCompactsWithoutGrowing) {
  KvBuffer buffer;
  buffer.Append(PositionTensor(0, 60), PositionTensor(0, 60));
  buffer.DropFront(50);
  EXPECT_EQ(buffer.size(), 10);
  // 10 live + 20 new fit in the 64-token capacity once the window moves to the front.
  buffer.Append(PositionTensor(60, 20), PositionTensor(60, 20));
  EXPECT_EQ(buffer.capacity(), 64);
  EXPECT_EQ(buffer.size(), 30);
  EXPECT_EQ(Positions(buffer.keys()).front(), 50);
  EXPECT_EQ(Positions(buffer.keys()).back(), 79);
}

TEST(KvBufferTest, OverlappingCompactionKeepsValues) {
  KvBuffer buffer;
  buffer.Append(PositionTensor(0, 60), PositionTensor(0, 60));
  buffer.DropFront(20);  // 40 live tokens starting at column 20: overlaps columns 0..39
  buffer.Append(PositionTensor(60, 10), PositionTensor(60, 10));
  EXPECT_EQ(buffer.capacity(), 64);
  std::vector<int64_t> expected;
  for (int64_t i = 20; i < 70; ++i) expected.push_back(i);
  EXPECT_EQ(Positions(buffer.keys()), expected);
}

TEST(KvBufferTest, TruncateAndViews) {
  KvBuffer buffer;
  buffer.Append(PositionTensor(0, 8), PositionTensor(0, 8));
  buffer.Truncate(5);
  EXPECT_THAT(Positions(buffer.keys(2, 3)), ElementsAre(2, 3, 4));
  buffer.Truncate(0);
  EXPECT_EQ(buffer.size(), 0);
  EXPECT_TRUE(buffer.defined());
}

TEST(KvBufferTest, CheckAppendRejectsMismatches) {
  KvBuffer buffer;
  EXPECT_FALSE(buffer.CheckAppend(at::zeros({2, 3}), at::zeros({2, 3})).ok());
  EXPECT_FALSE(buffer.CheckAppend(PositionTensor(0, 2), PositionTensor(0, 3)).ok());
  buffer.Append(PositionTensor(0, 2), PositionTensor(0, 2));
  EXPECT_FALSE(buffer.CheckAppend(PositionTensor(0, 1, 1, 3), PositionTensor(0, 1, 1, 3)).ok());
  EXPECT_FALSE(
      buffer.CheckAppend(PositionTensor(0, 1).to(at::kDouble), PositionTensor(0, 1).to(at::kDouble))
          .ok());
  EXPECT_TRUE(buffer.CheckAppend(PositionTensor(2, 1), PositionTensor(2, 1)).ok());
}

TEST(KvBufferTest, BatchOpsAndCompactClone) {
  KvBuffer buffer;
  buffer.Append(PositionTensor(0, 4, /*batch=*/2), PositionTensor(0, 4, 2));
  buffer.SelectBatch(at::tensor({1, 1, 0}, at::kLong));
  EXPECT_EQ(buffer.batch_size(), 3);
  EXPECT_EQ(buffer.keys()[0][0][0][0].item<float>(), 1000.0f);
  EXPECT_EQ(buffer.keys()[2][0][0][0].item<float>(), 0.0f);
  buffer.RepeatInterleaveBatch(2);
  EXPECT_EQ(buffer.batch_size(), 6);
  KvBuffer copy = buffer.CloneCompact();
  EXPECT_EQ(copy.capacity(), 4);
  EXPECT_EQ(copy.bytes(), 2 * 6 * 2 * 4 * 4 * 4);
  copy.keys().fill_(-1);
  EXPECT_EQ(buffer.keys()[0][0][0][0].item<float>(), 1000.0f);  // no shared storage
}

}  // namespace
}  // namespace kvserve::cache
