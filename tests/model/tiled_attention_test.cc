// Tests for TiledAttend: equal to Attend (batched GEMMs over the materialised score matrix)
// for every layer type, query offsets, cache offsets, unused static slots, grouped-query
// heads, head dims and query counts around the tile and block sizes, for each kernel this
// CPU runs (AVX-512 when present, and the portable one); inputs it does not take are refused.
#include "model/tiled_attention.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/attention.h"

// Cases name only the fields that differ from the defaults; GCC 12 warns about the others even
// though they have default member initializers.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace kvserve::model {
namespace {

using cache::LayerSpec;
using cache::LayerType;
using cache::LayerView;

struct Case {
  int64_t n = 1;           // queries
  int64_t heads = 2;       // query heads
  int64_t kv_heads = 1;    // kv heads
  int64_t d = 64;          // head dim
  int64_t q_start = 0;     // position of the first query
  int64_t kv_len = 0;      // keys in the view (0: q_start + n)
  int64_t kv_offset = 0;   // position of the view's first key
  int64_t num_valid = -1;  // -1: kv_len
  LayerSpec layer;

  std::string Name() const {
    return absl::StrCat("n=", n, " heads=", heads, "/", kv_heads, " d=", d, " q_start=", q_start,
                        " kv_len=", kv_len, " kv_offset=", kv_offset, " num_valid=", num_valid,
                        " layer=", cache::LayerTypeName(layer.type), "/", layer.window);
  }
};

std::vector<SimdLevel> Levels() {
  std::vector<SimdLevel> levels = {SimdLevel::kPortable};
  if (TiledAttentionLevel() == SimdLevel::kAvx512) levels.push_back(SimdLevel::kAvx512);
  return levels;
}

void ExpectMatchesAttend(Case c, uint64_t seed) {
  if (c.kv_len == 0) c.kv_len = c.q_start - c.kv_offset + c.n;
  if (c.num_valid < 0) c.num_valid = c.kv_len;
  at::manual_seed(seed);
  // Queries with a stride between positions wider than heads * d (a slice of a fused qkv).
  const at::Tensor qkv = at::randn({c.n, c.heads * c.d + 3 * c.d});
  const at::Tensor queries = qkv.narrow(1, 0, c.heads * c.d).view({c.n, c.heads, c.d});
  // Keys and values as a cache view: [1, kv_heads, kv_len, d], a permuted layout.
  const at::Tensor k = at::randn({1, c.kv_len, c.kv_heads, c.d}).permute({0, 2, 1, 3});
  const at::Tensor v = at::randn({1, c.kv_len, c.kv_heads, c.d}).permute({0, 2, 1, 3});
  const LayerView view{k, v, c.kv_offset, c.num_valid};
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.d));
  const at::Tensor expected = Attend(queries, view, c.q_start, c.layer, scale);
  for (SimdLevel level : Levels()) {
    at::Tensor out;
    ASSERT_TRUE(TiledAttend(queries, view, c.q_start, c.layer, scale, &out, level)) << c.Name();
    ASSERT_EQ(out.sizes(), expected.sizes()) << c.Name();
    // Rows that see no key are zeros in both.
    const double diff = (out - expected).abs().max().item<double>();
    EXPECT_LT(diff, 2e-5) << c.Name() << " level " << static_cast<int>(level);
  }
}

TEST(TiledAttentionTest, CausalPrefillsOfEverySizeAroundTheBlocks) {
  uint64_t seed = 1;
  for (int64_t n : {1, 2, 15, 16, 17, 31, 33, 64, 100}) {
    ExpectMatchesAttend({.n = n, .heads = 2, .kv_heads = 1}, seed++);
    ExpectMatchesAttend({.n = n, .heads = 4, .kv_heads = 4}, seed++);
    ExpectMatchesAttend({.n = n, .heads = 8, .kv_heads = 2, .d = 128}, seed++);
  }
}

TEST(TiledAttentionTest, HeadDimsItTakes) {
  uint64_t seed = 100;
  for (int64_t d : {16, 48, 64, 80, 96, 112, 128, 256}) {
    ExpectMatchesAttend({.n = 37, .heads = 4, .kv_heads = 2, .d = d}, seed++);
  }
}

TEST(TiledAttentionTest, QueriesAfterACachedPrefix) {
  // A prefill continuing 50 cached tokens (a prefix hit or a chunked prefill's second chunk).
  ExpectMatchesAttend({.n = 40, .heads = 4, .kv_heads = 2, .q_start = 50}, 7);
  ExpectMatchesAttend({.n = 3, .heads = 2, .kv_heads = 1, .q_start = 200}, 8);
}

TEST(TiledAttentionTest, SlidingWindowAndChunkedLayers) {
  uint64_t seed = 200;
  for (int64_t window : {2, 5, 16, 33}) {
    ExpectMatchesAttend(
        {.n = 70, .heads = 4, .kv_heads = 2, .layer = {LayerType::kSlidingAttention, window}},
        seed++);
    ExpectMatchesAttend({.n = 70,
                         .heads = 4,
                         .kv_heads = 2,
                         .q_start = 20,
                         .layer = {LayerType::kChunkedAttention, window}},
                        seed++);
  }
  // A sliding cache that dropped its oldest keys: the view starts at position 30.
  ExpectMatchesAttend({.n = 20,
                       .heads = 2,
                       .kv_heads = 1,
                       .q_start = 60,
                       .kv_offset = 30,
                       .layer = {LayerType::kSlidingAttention, 24}},
                      seed++);
}

TEST(TiledAttentionTest, UnusedStaticSlotsAreIgnored) {
  // A static cache of 128 slots of which 45 hold keys.
  ExpectMatchesAttend(
      {.n = 25, .heads = 4, .kv_heads = 2, .q_start = 20, .kv_len = 128, .num_valid = 45}, 300);
}

TEST(TiledAttentionTest, RowsThatSeeNoKeyAreZeros) {
  // Keys start after the first queries' positions: those rows see nothing.
  const Case c{.n = 20, .heads = 2, .kv_heads = 1, .q_start = 0, .kv_len = 30, .kv_offset = 10};
  at::manual_seed(5);
  const at::Tensor queries = at::randn({c.n, c.heads, c.d});
  const at::Tensor k = at::randn({1, c.kv_heads, c.kv_len, c.d});
  const LayerView view{k, k, c.kv_offset, c.kv_len};
  for (SimdLevel level : Levels()) {
    at::Tensor out;
    ASSERT_TRUE(TiledAttend(queries, view, c.q_start, c.layer, 0.125, &out, level));
    EXPECT_EQ(out.narrow(0, 0, 10).abs().max().item<float>(), 0.0f);
    EXPECT_GT(out.narrow(0, 10, 10).abs().max().item<float>(), 0.0f);
  }
}

TEST(TiledAttentionTest, RefusesWhatItDoesNotTake) {
  const at::Tensor q = at::randn({4, 2, 64});
  const at::Tensor k = at::randn({1, 1, 4, 64});
  const LayerView view{k, k, 0, 4};
  at::Tensor out;
  EXPECT_FALSE(TiledAttend(q.to(at::kDouble), view, 0, {}, 0.125, &out, SimdLevel::kPortable));
  // 3 query heads cannot share 2 kv heads.
  const at::Tensor k2 = at::randn({1, 2, 4, 64});
  EXPECT_FALSE(
      TiledAttend(at::randn({4, 3, 64}), {k2, k2, 0, 4}, 0, {}, 0.125, &out, SimdLevel::kPortable));
  EXPECT_FALSE(TiledAttend(q, view, 0, {}, 0.125, &out, SimdLevel::kAvx2));
  // The AVX-512 kernel takes head dims that are multiples of 16.
  const at::Tensor q24 = at::randn({4, 2, 24});
  const at::Tensor k24 = at::randn({1, 1, 4, 24});
  EXPECT_FALSE(TiledAttend(q24, {k24, k24, 0, 4}, 0, {}, 0.2, &out, SimdLevel::kAvx512));
  EXPECT_TRUE(TiledAttend(q24, {k24, k24, 0, 4}, 0, {}, 0.2, &out, SimdLevel::kPortable));
}

}  // namespace
}  // namespace kvserve::model
