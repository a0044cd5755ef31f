// Tests for MoveToHugePageArena: values, dtypes and shapes survive the move, tied tensors stay
// tied, the arena starts on a 2 MB boundary with every tensor cache-line aligned, what it does
// not take is left alone, and small sets or KVSERVE_WEIGHT_HUGEPAGES=0 move nothing.
#include "model/weight_arena.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>

namespace kvserve::model {
namespace {

uintptr_t Address(const at::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()); }

TEST(WeightArenaTest, MovesValuesKeepsTiesAndAligns) {
  at::manual_seed(1);
  at::Tensor big = at::randn({1024, 1024});                    // 4 MB float32
  at::Tensor narrow = at::randn({333, 77}).to(at::kBFloat16);  // odd size: padded to 64
  at::Tensor tied = at::randn({512, 512});
  at::Tensor tied_again = tied;                     // the same storage
  at::Tensor transposed = at::randn({64, 32}).t();  // not contiguous: left alone
  at::Tensor undefined;
  const at::Tensor big_before = big.clone(), narrow_before = narrow.clone(),
                   tied_before = tied.clone();
  const void* big_old = big.data_ptr();
  const void* transposed_old = transposed.data_ptr();

  const int64_t moved =
      MoveToHugePageArena({&big, &narrow, &tied, &tied_again, &transposed, &undefined});
  EXPECT_EQ(moved, 4 * 1024 * 1024 + (333 * 77 * 2 + 63) / 64 * 64 + 512 * 512 * 4);
  EXPECT_NE(big.data_ptr(), big_old);
  EXPECT_EQ(Address(big) % (2 << 20), 0u);
  EXPECT_EQ(Address(narrow) % 64, 0u);
  EXPECT_EQ(Address(tied) % 64, 0u);
  EXPECT_TRUE(at::equal(big, big_before));
  EXPECT_TRUE(at::equal(narrow, narrow_before));
  EXPECT_EQ(narrow.scalar_type(), at::kBFloat16);
  EXPECT_EQ(narrow.sizes(), (std::vector<int64_t>{333, 77}));
  EXPECT_TRUE(at::equal(tied, tied_before));
  EXPECT_EQ(tied.data_ptr(), tied_again.data_ptr());
  EXPECT_EQ(transposed.data_ptr(), transposed_old);
  EXPECT_FALSE(undefined.defined());

  // The arena outlives any one tensor in it; writes go to the copies.
  big = at::Tensor();
  tied.fill_(2.0f);
  EXPECT_EQ(tied_again[3][5].item<float>(), 2.0f);
  EXPECT_TRUE(at::equal(narrow, narrow_before));
}

TEST(WeightArenaTest, MovesNothingWhenSmallOrTurnedOff) {
  at::Tensor small = at::randn({100, 100});
  const void* before = small.data_ptr();
  EXPECT_EQ(MoveToHugePageArena({&small}), 0);
  EXPECT_EQ(small.data_ptr(), before);

  at::Tensor big = at::randn({1024, 1024});
  const void* big_before = big.data_ptr();
  ::setenv("KVSERVE_WEIGHT_HUGEPAGES", "0", 1);
  EXPECT_EQ(MoveToHugePageArena({&big}), 0);
  ::unsetenv("KVSERVE_WEIGHT_HUGEPAGES");
  EXPECT_EQ(big.data_ptr(), big_before);
  EXPECT_GT(MoveToHugePageArena({&big}), 0);
  EXPECT_NE(big.data_ptr(), big_before);
}

}  // namespace
}  // namespace kvserve::model
