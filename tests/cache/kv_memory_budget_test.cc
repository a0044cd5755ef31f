// Tests of KvMemoryBudget and KvCache's budget hooks: the out-of-memory error a limit or an
// injected fault raises, exact rollback of a failed step for every cache strategy, conversion
// to offloaded storage, and bytes given back when a cache goes away.
#include "cache/kv_memory_budget.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cache/cache_factory.h"
#include "cache/cache_spec.h"
#include "cache/kv_cache.h"
#include "cache/torch_compat.h"

namespace kvserve::cache {
namespace kv_memory_budget_test {

using ::testing::HasSubstr;

constexpr int64_t kHeads = 2;
constexpr int64_t kHeadDim = 16;
// K and V of one token of one layer, float32.
constexpr int64_t kTokenBytes = 2 * kHeads * kHeadDim * 4;
// What one more granule of a dynamic buffer (KvBuffer::kGranuleTokens tokens) costs.
constexpr int64_t kGranuleBytes = 64 * kTokenBytes;

// [1, kHeads, n, kHeadDim] float32: every value is determined by the token's absolute position
// (start + t), its head and its lane, so caches fed the same positions hold the same numbers.
at::Tensor Kv(int64_t start, int64_t n, float offset = 0) {
  const at::Tensor positions = at::arange(start, start + n, at::kFloat).reshape({1, 1, n, 1});
  const at::Tensor lanes =
      at::arange(kHeads * kHeadDim, at::kFloat).reshape({1, kHeads, 1, kHeadDim});
  return (positions * 0.25 + lanes * 0.01 + offset).contiguous();
}

// Feeds tokens [start, start + n) to every layer of `cache`, as one model step does.
void Step(KvCache& cache, int64_t start, int64_t n) {
  for (int i = 0; i < cache.num_layers(); ++i) {
    ASSERT_TRUE(cache.Update(i, Kv(start, n), Kv(start, n, 100)).ok()) << "layer " << i;
  }
}

std::unique_ptr<KvCache> Make(const CacheSpec& spec, const std::vector<LayerSpec>& layers) {
  absl::StatusOr<std::unique_ptr<KvCache>> cache = MakeCache(spec, layers);
  EXPECT_TRUE(cache.ok()) << cache.status();
  return cache.ok() ? *std::move(cache) : nullptr;
}

CacheSpec Spec(std::string_view implementation, QuantizationConfig config = {},
               std::optional<int64_t> max_cache_len = std::nullopt) {
  absl::StatusOr<CacheSpec> spec = CacheSpec::Parse(implementation, config, true, max_cache_len);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : CacheSpec();
}

CacheSpec Quanto(int64_t residual_length) {
  QuantizationConfig config;
  config.backend = "quanto";
  config.residual_length = residual_length;
  return Spec("quantized", config);
}

// Feeds one token at `position` to every layer of both caches and expects identical views.
void ExpectSameNextStep(KvCache& cache, KvCache& reference, int64_t position) {
  ASSERT_EQ(cache.num_layers(), reference.num_layers());
  for (int i = 0; i < cache.num_layers(); ++i) {
    SCOPED_TRACE("layer " + std::to_string(i));
    EXPECT_EQ(cache.layer(i).SeqLength(), reference.layer(i).SeqLength());
    absl::StatusOr<LayerView> got = cache.Update(i, Kv(position, 1), Kv(position, 1, 100));
    absl::StatusOr<LayerView> want = reference.Update(i, Kv(position, 1), Kv(position, 1, 100));
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_TRUE(want.ok()) << want.status();
    EXPECT_EQ(got->kv_offset, want->kv_offset);
    EXPECT_EQ(got->num_valid, want->num_valid);
    ASSERT_EQ(got->keys.sizes(), want->keys.sizes());
    EXPECT_TRUE(at::equal(got->keys, want->keys));
    EXPECT_TRUE(at::equal(got->values, want->values));
  }
}

TEST(KvMemoryBudgetTest, InactiveBudgetNeverThrows) {
  KvMemoryBudget budget(KvMemoryBudgetOptions{});
  EXPECT_FALSE(budget.active());
  EXPECT_EQ(budget.limit(), -1);
  std::unique_ptr<KvCache> cache = Make(Spec("dynamic"), {{}, {}});
  ASSERT_NE(cache, nullptr);
  cache->AttachBudget(&budget);
  cache->BeginStep();
  Step(*cache, 0, 200);
  cache->CommitStep();
  // Still accounted: 200 tokens take 256 slots in each layer.
  EXPECT_EQ(budget.used(), 2 * 256 * kTokenBytes);
  EXPECT_EQ(budget.used(), cache->Memory().device_bytes);
  budget.Add(int64_t{1} << 50);
  EXPECT_NO_THROW(budget.CheckGrowth(int64_t{1} << 50));
  EXPECT_EQ(budget.injected_faults(), 0);
  EXPECT_GT(budget.available(), int64_t{1} << 60);
}

TEST(KvMemoryBudgetTest, AvailableIsWhatIsLeftUnderTheLimit) {
  KvMemoryBudget budget({.device_limit_bytes = 1000});
  EXPECT_TRUE(budget.active());
  EXPECT_EQ(budget.available(), 1000);
  budget.Add(1200);
  EXPECT_EQ(budget.used(), 1200);
  EXPECT_EQ(budget.available(), -200);
  budget.Add(-1200);
  EXPECT_EQ(budget.used(), 0);
}

TEST(KvMemoryBudgetTest, CheckGrowthThrowsOnlyOverTheLimit) {
  KvMemoryBudget budget({.device_limit_bytes = 1000});
  budget.Add(1000);
  EXPECT_NO_THROW(budget.CheckGrowth(1000));  // at the limit is not over it
  budget.Add(1);
  try {
    budget.CheckGrowth(1);
    ADD_FAILURE() << "no OutOfMemoryError over the limit";
  } catch (const compat::OutOfMemoryError& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr("1001 bytes in use"));
    EXPECT_THAT(std::string(e.what()), HasSubstr("limit 1000"));
  }
  EXPECT_EQ(budget.injected_faults(), 0);
}

TEST(KvMemoryBudgetTest, LimitThrowsFromUpdateAndUsedReflectsTheBytes) {
  // Room for two layers of one granule each, and not a byte more.
  KvMemoryBudget budget({.device_limit_bytes = 2 * kGranuleBytes});
  std::unique_ptr<KvCache> cache = Make(Spec("dynamic"), {{}, {}});
  ASSERT_NE(cache, nullptr);
  cache->AttachBudget(&budget);
  EXPECT_EQ(budget.used(), 0);
  cache->BeginStep();
  Step(*cache, 0, 3);
  cache->CommitStep();
  EXPECT_EQ(budget.used(), 2 * kGranuleBytes);
  EXPECT_EQ(budget.available(), 0);

  // 70 more tokens grow layer 0 to 128 slots: one granule over the limit.
  cache->BeginStep();
  EXPECT_THROW((void)cache->Update(0, Kv(3, 70), Kv(3, 70, 100)), compat::OutOfMemoryError);
  EXPECT_EQ(cache->layer(0).SeqLength(), 73);  // grown when the error came
  EXPECT_EQ(budget.used(), 3 * kGranuleBytes);
  EXPECT_EQ(budget.used(), cache->Memory().device_bytes);
  EXPECT_EQ(budget.available(), -kGranuleBytes);
  ASSERT_TRUE(cache->RollbackStep().ok());
  EXPECT_EQ(cache->layer(0).SeqLength(), 3);
  EXPECT_EQ(cache->layer(1).SeqLength(), 3);
  EXPECT_EQ(budget.used(), cache->Memory().device_bytes);
}

// A step that fails part-way: `cache` takes tokens [position, position + step_tokens) layer by
// layer, then `trigger` (a one-layer dynamic cache on the same budget, as another request of
// the same batch) grows. The out-of-memory error comes from whichever grows over the limit
// first; both caches then roll back. Returns the layer of `cache` that threw, -1 for none.
int FailStep(KvCache& cache, KvCache& trigger, int64_t position, int64_t step_tokens) {
  cache.BeginStep();
  trigger.BeginStep();
  int failed_layer = -1;
  bool thrown = false;
  for (int i = 0; i < cache.num_layers() && !thrown; ++i) {
    try {
      absl::StatusOr<LayerView> view =
          cache.Update(i, Kv(position, step_tokens), Kv(position, step_tokens, 100));
      EXPECT_TRUE(view.ok()) << view.status();
    } catch (const compat::OutOfMemoryError&) {
      failed_layer = i;
      thrown = true;
    }
  }
  if (!thrown) {
    // 1000 tokens outgrow whatever `cache` freed in this step.
    EXPECT_THROW((void)trigger.Update(0, Kv(3, 1000), Kv(3, 1000, 100)), compat::OutOfMemoryError);
  }
  EXPECT_TRUE(cache.RollbackStep().ok());
  EXPECT_TRUE(trigger.RollbackStep().ok());
  return failed_layer;
}

struct RollbackCase {
  std::string name;
  CacheSpec spec;
  std::vector<LayerSpec> layers;
  std::vector<int64_t> committed_steps;  // tokens of each step before the failing one
  int64_t failing_step_tokens;
  int64_t headroom_bytes;  // budget limit: the bytes held before the failing step plus this
  int expected_failed_layer;
};

void ExpectRollbackRestoresEveryLayer(const RollbackCase& c) {
  SCOPED_TRACE(c.name);
  std::unique_ptr<KvCache> cache = Make(c.spec, c.layers);
  std::unique_ptr<KvCache> reference = Make(c.spec, c.layers);
  std::unique_ptr<KvCache> trigger = Make(Spec("dynamic"), {{}});
  ASSERT_NE(cache, nullptr);
  ASSERT_NE(reference, nullptr);
  ASSERT_NE(trigger, nullptr);
  int64_t position = 0;
  for (int64_t n : c.committed_steps) {
    Step(*cache, position, n);
    Step(*reference, position, n);
    position += n;
  }
  Step(*trigger, 0, 3);
  const int64_t held = cache->Memory().device_bytes + trigger->Memory().device_bytes;
  KvMemoryBudget budget({.device_limit_bytes = held + c.headroom_bytes});
  cache->AttachBudget(&budget);
  trigger->AttachBudget(&budget);
  EXPECT_EQ(budget.used(), held);

  EXPECT_EQ(FailStep(*cache, *trigger, position, c.failing_step_tokens), c.expected_failed_layer);
  for (int i = 0; i < cache->num_layers(); ++i) {
    EXPECT_EQ(cache->layer(i).SeqLength(), position) << "layer " << i;
  }
  EXPECT_EQ(trigger->SeqLength(), 3);
  EXPECT_EQ(budget.used(), cache->Memory().device_bytes + trigger->Memory().device_bytes);

  // The next step sees exactly what a cache that never saw the failed step sees.
  cache->BeginStep();
  ExpectSameNextStep(*cache, *reference, position);
  cache->CommitStep();
  EXPECT_EQ(budget.used(), cache->Memory().device_bytes + trigger->Memory().device_bytes);
}

TEST(KvMemoryBudgetTest, RollbackRestoresDynamicLayers) {
  // Layer 0 grows by one granule within the headroom; layer 1's granule goes over.
  ExpectRollbackRestoresEveryLayer({.name = "dynamic",
                                    .spec = Spec("dynamic"),
                                    .layers = {{}, {}},
                                    .committed_steps = {3, 1},
                                    .failing_step_tokens = 70,
                                    .headroom_bytes = kGranuleBytes,
                                    .expected_failed_layer = 1});
}

TEST(KvMemoryBudgetTest, RollbackRestoresASlidingWindowLayerPastItsWindow) {
  // The sliding layer (window 4) takes 5 tokens without growing, which would drop states a
  // rollback needs; the full layer then grows past its 64 slots and throws.
  ExpectRollbackRestoresEveryLayer({.name = "sliding",
                                    .spec = Spec("dynamic"),
                                    .layers = {{LayerType::kSlidingAttention, 4}, {}},
                                    .committed_steps = {60},
                                    .failing_step_tokens = 5,
                                    .headroom_bytes = 0,
                                    .expected_failed_layer = 1});
}

TEST(KvMemoryBudgetTest, RollbackRestoresStaticLayers) {
  // Static layers never grow after their first update: the other cache's growth fails the step.
  ExpectRollbackRestoresEveryLayer({.name = "static",
                                    .spec = Spec("static", {}, 16),
                                    .layers = {{}, {}},
                                    .committed_steps = {5, 1},
                                    .failing_step_tokens = 3,
                                    .headroom_bytes = 0,
                                    .expected_failed_layer = -1});
}

TEST(KvMemoryBudgetTest, RollbackRestoresQuantizedLayersWhoseResidualGrew) {
  // residual_length 8: the failing step appends 70 tokens to a 1-token residual, growing it
  // from 64 to 128 slots; layer 0 fits the headroom, layer 1 does not.
  ExpectRollbackRestoresEveryLayer({.name = "quanto residual",
                                    .spec = Quanto(8),
                                    .layers = {{}, {}},
                                    .committed_steps = {5, 1},
                                    .failing_step_tokens = 70,
                                    .headroom_bytes = kGranuleBytes,
                                    .expected_failed_layer = 1});
}

TEST(KvMemoryBudgetTest, RollbackRestoresQuantizedLayersThatRequantized) {
  // residual_length 2: the failing step flushes the residual and requantizes every token in
  // both layers, which a crop cannot undo; the other cache's growth fails the step.
  ExpectRollbackRestoresEveryLayer({.name = "quanto flush",
                                    .spec = Quanto(2),
                                    .layers = {{}, {}},
                                    .committed_steps = {5, 1},
                                    .failing_step_tokens = 1,
                                    .headroom_bytes = 0,
                                    .expected_failed_layer = -1});
}

TEST(KvMemoryBudgetTest, RollbackOfAFailedFirstStepEmptiesTheCache) {
  KvMemoryBudget budget({.device_limit_bytes = kGranuleBytes});
  std::unique_ptr<KvCache> cache = Make(Spec("dynamic"), {{}, {}});
  ASSERT_NE(cache, nullptr);
  cache->AttachBudget(&budget);
  cache->BeginStep();
  ASSERT_TRUE(cache->Update(0, Kv(0, 3), Kv(0, 3, 100)).ok());
  EXPECT_THROW((void)cache->Update(1, Kv(0, 3), Kv(0, 3, 100)), compat::OutOfMemoryError);
  ASSERT_TRUE(cache->RollbackStep().ok());
  EXPECT_EQ(cache->layer(0).SeqLength(), 0);
  EXPECT_EQ(cache->layer(1).SeqLength(), 0);
  EXPECT_EQ(cache->Memory().device_bytes, 0);
  EXPECT_EQ(budget.used(), 0);
}

// Every strategy's layers keep their contents when moved to the host.
void ExpectConversionKeepsContents(const std::string& name, const CacheSpec& spec,
                                   const std::vector<LayerSpec>& layers) {
  SCOPED_TRACE(name);
  KvMemoryBudget budget(KvMemoryBudgetOptions{});
  std::unique_ptr<KvCache> cache = Make(spec, layers);
  std::unique_ptr<KvCache> reference = Make(spec, layers);
  ASSERT_NE(cache, nullptr);
  ASSERT_NE(reference, nullptr);
  cache->AttachBudget(&budget);
  Step(*cache, 0, 6);
  Step(*reference, 0, 6);
  Step(*cache, 6, 1);
  Step(*reference, 6, 1);
  const MemoryUsage before = cache->Memory();
  ASSERT_GT(before.device_bytes, 0);
  EXPECT_EQ(before.host_bytes, 0);
  EXPECT_EQ(budget.used(), before.device_bytes);
  EXPECT_FALSE(cache->fully_offloaded());

  EXPECT_EQ(cache->ConvertToOffloaded(), before.device_bytes);
  EXPECT_TRUE(cache->fully_offloaded());
  EXPECT_EQ(cache->Memory(), (MemoryUsage{.device_bytes = 0, .host_bytes = before.device_bytes}));
  EXPECT_EQ(budget.used(), 0);
  // Converting again moves nothing.
  EXPECT_EQ(cache->ConvertToOffloaded(), 0);

  ExpectSameNextStep(*cache, *reference, 7);
  EXPECT_EQ(cache->Memory().device_bytes, 0);
  EXPECT_EQ(budget.used(), 0);
}

TEST(KvMemoryBudgetTest, ConvertToOffloadedKeepsContentsAndMovesBytesToTheHost) {
  ExpectConversionKeepsContents("dynamic", Spec("dynamic"),
                                {{}, {LayerType::kSlidingAttention, 4}});
  ExpectConversionKeepsContents("static", Spec("static", {}, 16),
                                {{}, {LayerType::kSlidingAttention, 4}});
  ExpectConversionKeepsContents("quanto", Quanto(4), {{}, {}});
}

TEST(KvMemoryBudgetTest, DestroyingAnAttachedCacheGivesItsBytesBack) {
  KvMemoryBudget budget({.device_limit_bytes = 1 << 20});
  std::unique_ptr<KvCache> first = Make(Spec("dynamic"), {{}, {}});
  std::unique_ptr<KvCache> second = Make(Spec("static", {}, 16), {{}});
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  first->AttachBudget(&budget);
  second->AttachBudget(&budget);
  Step(*first, 0, 3);
  Step(*second, 0, 3);
  EXPECT_EQ(budget.used(), 2 * kGranuleBytes + 16 * kTokenBytes);
  first.reset();
  EXPECT_EQ(budget.used(), 16 * kTokenBytes);
  second.reset();
  EXPECT_EQ(budget.used(), 0);
}

TEST(KvMemoryBudgetTest, AttachingCountsWhatTheCacheAlreadyHolds) {
  std::unique_ptr<KvCache> cache = Make(Spec("dynamic"), {{}});
  ASSERT_NE(cache, nullptr);
  Step(*cache, 0, 3);
  KvMemoryBudget first(KvMemoryBudgetOptions{});
  KvMemoryBudget second(KvMemoryBudgetOptions{});
  cache->AttachBudget(&first);
  EXPECT_EQ(first.used(), kGranuleBytes);
  // Moving to another budget takes the bytes along.
  cache->AttachBudget(&second);
  EXPECT_EQ(first.used(), 0);
  EXPECT_EQ(second.used(), kGranuleBytes);
}

TEST(KvMemoryBudgetTest, FaultRateOneThrowsOnTheFirstGrowth) {
  KvMemoryBudget budget({.fault_inject_oom_rate = 1});
  EXPECT_TRUE(budget.active());
  std::unique_ptr<KvCache> cache = Make(Spec("dynamic"), {{}});
  ASSERT_NE(cache, nullptr);
  cache->AttachBudget(&budget);
  cache->BeginStep();
  try {
    (void)cache->Update(0, Kv(0, 1), Kv(0, 1, 100));
    ADD_FAILURE() << "no injected OutOfMemoryError";
  } catch (const compat::OutOfMemoryError& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr("injected"));
  }
  EXPECT_EQ(budget.injected_faults(), 1);
  ASSERT_TRUE(cache->RollbackStep().ok());
  EXPECT_EQ(cache->SeqLength(), 0);
  EXPECT_EQ(budget.used(), 0);
}

TEST(KvMemoryBudgetTest, FaultsAreOnlyInjectedOnGrowth) {
  KvMemoryBudget budget({.fault_inject_oom_rate = 1});
  std::unique_ptr<KvCache> cache = Make(Spec("dynamic"), {{}});
  ASSERT_NE(cache, nullptr);
  Step(*cache, 0, 3);  // 64 slots allocated before the budget is attached
  cache->AttachBudget(&budget);
  cache->BeginStep();
  EXPECT_NO_THROW((void)cache->Update(0, Kv(3, 1), Kv(3, 1, 100)));
  cache->CommitStep();
  EXPECT_EQ(budget.injected_faults(), 0);
  EXPECT_EQ(cache->SeqLength(), 4);
}

TEST(KvMemoryBudgetTest, FaultRateZeroNeverThrows) {
  KvMemoryBudget budget({.fault_inject_oom_rate = 0, .seed = 7});
  EXPECT_FALSE(budget.active());
  for (int i = 0; i < 1000; ++i) budget.CheckGrowth(1);
  EXPECT_EQ(budget.injected_faults(), 0);
  std::unique_ptr<KvCache> cache = Make(Spec("dynamic"), {{}});
  ASSERT_NE(cache, nullptr);
  cache->AttachBudget(&budget);
  for (int64_t position = 0; position < 300; position += 30) Step(*cache, position, 30);
  EXPECT_EQ(cache->SeqLength(), 300);
  EXPECT_EQ(budget.injected_faults(), 0);
}

// Which of `n` growth checks throw.
std::vector<bool> FaultPattern(double rate, uint64_t seed, int n) {
  KvMemoryBudget budget({.fault_inject_oom_rate = rate, .seed = seed});
  std::vector<bool> pattern;
  for (int i = 0; i < n; ++i) {
    bool thrown = false;
    try {
      budget.CheckGrowth(1);
    } catch (const compat::OutOfMemoryError&) {
      thrown = true;
    }
    pattern.push_back(thrown);
  }
  return pattern;
}

TEST(KvMemoryBudgetTest, SameSeedGivesTheSameFaultPattern) {
  const std::vector<bool> pattern = FaultPattern(0.5, 42, 64);
  EXPECT_EQ(FaultPattern(0.5, 42, 64), pattern);
  // The pattern mixes faults and successes, and another seed draws another one.
  const int64_t faults = std::count(pattern.begin(), pattern.end(), true);
  EXPECT_GT(faults, 0);
  EXPECT_LT(faults, 64);
  EXPECT_NE(FaultPattern(0.5, 43, 64), pattern);
}

TEST(KvMemoryBudgetTest, InjectedFaultsAreCounted) {
  KvMemoryBudget budget({.fault_inject_oom_rate = 0.5, .seed = 42});
  const std::vector<bool> pattern = FaultPattern(0.5, 42, 64);
  for (int i = 0; i < 64; ++i) {
    try {
      budget.CheckGrowth(1);
    } catch (const compat::OutOfMemoryError&) {
    }
  }
  EXPECT_EQ(budget.injected_faults(), std::count(pattern.begin(), pattern.end(), true));
}

}  // namespace kv_memory_budget_test
}  // namespace kvserve::cache
