// Tests for KvCacheManager without a model: a 4-layer shape with synthetic K/V that depend only
// on (layer, position), so that a copied prefix equals what a cold prefill computes.
#include "cache/kv_cache_manager.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cache/cache_factory.h"
#include "cache/dynamic_layer.h"
#include "cache/quantized_layer.h"
#include "cache/snapshot.h"
#include "cache/torch_compat.h"

namespace kvserve::cache {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using Decision = Admission::Decision;
using Tokens = std::vector<int32_t>;

constexpr int64_t kHeads = 2;
constexpr int64_t kDim = 8;
// One token of one layer: keys + values, 2 heads x 8 dims of float32.
constexpr int64_t kTokenBytes = 2 * kHeads * kDim * 4;  // 128
// A dynamic layer's storage grows in granules of 64 tokens.
constexpr int64_t kGranuleBytes = 64 * kTokenBytes;  // 8192
const absl::Time kStart = absl::FromUnixSeconds(5000);

KvModelShape Shape(int num_layers = 4) {
  return {.layers = std::vector<LayerSpec>(num_layers),
          .num_kv_heads = kHeads,
          .head_dim = kDim,
          .bytes_per_element = 4,
          .fingerprint = "m"};
}

// Full, sliding (window 4), full, chunked (window 8).
KvModelShape SlidingShape() {
  KvModelShape shape = Shape();
  shape.layers = {{}, {LayerType::kSlidingAttention, 4}, {}, {LayerType::kChunkedAttention, 8}};
  return shape;
}

// The tests below the shared-prefix ones were written for the deep-copy contract: they copy.
KvCacheManagerOptions Options(int64_t device_limit_bytes = -1, int64_t min_tokens = 8) {
  KvCacheManagerOptions options;
  options.budget.device_limit_bytes = device_limit_bytes;
  options.auto_prefix_min_tokens = min_tokens;
  options.prefix_kv_mode = PrefixKvMode::kCopy;
  return options;
}

// The manager's default: prefixes read in place where the strategy allows it.
KvCacheManagerOptions SharedOptions(int64_t device_limit_bytes = -1) {
  KvCacheManagerOptions options = Options(device_limit_bytes);
  options.prefix_kv_mode = KvCacheManagerOptions{}.prefix_kv_mode;
  return options;
}

constexpr int kMaxLayers = 4;
constexpr int64_t kMaxPositions = 256;

// What a forward computes for `layer` at absolute positions [start, start + n):
// [1, kHeads, n, kDim], distinct per layer, position, head and dim, keys and values. Cut from
// one table computed once, so that a position's elements are bitwise the same however the
// tokens are split into updates.
at::Tensor Kv(int layer, int64_t start, int64_t n, bool values) {
  static const std::vector<at::Tensor>* const kTable = [] {
    auto* table = new std::vector<at::Tensor>();
    const at::Tensor pos = at::arange(kMaxPositions, at::kFloat).view({1, 1, kMaxPositions, 1});
    const at::Tensor head = at::arange(kHeads, at::kFloat).view({1, kHeads, 1, 1});
    const at::Tensor dim = at::arange(kDim, at::kFloat).view({1, 1, 1, kDim});
    for (int l = 0; l < kMaxLayers; ++l) {
      for (double v : {0.0, 5.0}) {
        table->push_back(
            (at::sin(pos * 0.37 + head * 1.3 + dim * 0.71 + l * 2.9 + v) * 2).contiguous());
      }
    }
    return table;
  }();
  EXPECT_LE(start + n, kMaxPositions);
  return (*kTable)[layer * 2 + (values ? 1 : 0)].narrow(2, start, n).contiguous();
}

Tokens Range(int32_t first, int64_t n) {
  Tokens t;
  for (int64_t i = 0; i < n; ++i) t.push_back(first + static_cast<int32_t>(i));
  return t;
}

Tokens Concat(Tokens a, const Tokens& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

CacheSpec Spec(std::string_view implementation, std::optional<int64_t> max_cache_len = {}) {
  absl::StatusOr<CacheSpec> spec = CacheSpec::Parse(implementation, {}, true, max_cache_len);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : CacheSpec{};
}

CacheSpec NoCache() { return *CacheSpec::Parse("", {}, /*use_cache=*/false); }

// quanto int4, residual 2.
CacheSpec Quanto() {
  QuantizationConfig config;
  config.backend = "quanto";
  config.nbits = 4;
  config.residual_length = 2;
  absl::StatusOr<CacheSpec> spec = CacheSpec::Parse("quantized", config);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : CacheSpec{};
}

SequenceRequest Request(Tokens prompt, int64_t max_new_tokens = 1, CacheSpec cache = Spec("")) {
  SequenceRequest r;
  r.prompt = std::move(prompt);
  r.max_new_tokens = max_new_tokens;
  r.cache = std::move(cache);
  return r;
}

// A forward over `cache` of `n` new tokens: every layer updated in order, as the model does.
// A budget's out-of-memory error propagates.
void Forward(KvCache* cache, int64_t n) {
  ASSERT_NE(cache, nullptr);
  const int64_t start = cache->SeqLength();
  for (int i = 0; i < cache->num_layers(); ++i) {
    absl::StatusOr<LayerView> view =
        cache->Update(i, Kv(i, start, n, false), Kv(i, start, n, true));
    ASSERT_TRUE(view.ok()) << view.status();
  }
}

using Work = std::vector<std::pair<SequenceId, int64_t>>;  // (sequence, new tokens)

// One engine step: BeginStep, the forward of every sequence, Commit; or, when the forward
// runs out of memory, Rollback (which must restore every cache) and false.
bool RunStep(KvCacheManager& m, const Work& work) {
  std::vector<SequenceId> ids;
  for (const auto& [id, n] : work) ids.push_back(id);
  KvStep step = m.BeginStep(ids);
  try {
    for (const auto& [id, n] : work) {
      if (KvCache* cache = m.cache(id)) Forward(cache, n);  // none for use_cache=false
    }
  } catch (const compat::OutOfMemoryError&) {
    EXPECT_THAT(step.Rollback(), IsEmpty());
    return false;
  }
  step.Commit();
  return true;
}

// CanAdmit (alone) and Allocate, expecting both to succeed.
Allocation Admit(KvCacheManager& m, SequenceId id) {
  const Admission admission = m.CanAdmit(id, {});
  EXPECT_EQ(admission.decision, Decision::kAdmit) << admission.reason;
  absl::StatusOr<Allocation> allocation = m.Allocate(id);
  EXPECT_TRUE(allocation.ok()) << allocation.status();
  return allocation.ok() ? *allocation : Allocation{};
}

// Adds, admits and prefills a sequence's whole prompt, then reports it prefilled.
void Prefill(KvCacheManager& m, SequenceId id, SequenceRequest request) {
  const int64_t prompt = static_cast<int64_t>(request.prompt.size());
  ASSERT_TRUE(m.Add(id, std::move(request)).ok());
  const Allocation allocation = Admit(m, id);
  ASSERT_TRUE(RunStep(m, {{id, prompt - allocation.num_cached_tokens}}));
  m.OnPrefilled(id);
}

// A whole registration: add, admit, prefill, complete, release.
absl::StatusOr<PrefixInfo> Register(KvCacheManager& m, SequenceId id, const std::string& name,
                                    Tokens prompt, NamedPrefixOptions options = {}) {
  SequenceRequest r = Request(std::move(prompt));
  r.registration = true;
  r.registration_name = name;
  r.registration_options = std::move(options);
  const int64_t n = static_cast<int64_t>(r.prompt.size());
  if (absl::Status s = m.Add(id, std::move(r)); !s.ok()) return s;
  Admit(m, id);
  EXPECT_TRUE(RunStep(m, {{id, n}}));
  absl::StatusOr<PrefixInfo> info = m.CompleteRegistration(id);
  m.Release(id);
  return info;
}

NamedPrefixOptions Unpinned() {
  NamedPrefixOptions options;
  options.pinned = false;
  return options;
}

NamedPrefixOptions Ttl(absl::Duration ttl) {
  NamedPrefixOptions options;
  options.ttl = ttl;
  return options;
}

// The named snapshot as the published catalog holds it (null when absent).
std::shared_ptr<const Snapshot> Published(KvCacheManager& m, const std::string& name) {
  m.Maintain();
  std::shared_ptr<const PrefixCatalog> catalog = m.catalog().Get();
  auto it = catalog->find(name);
  return it == catalog->end() ? nullptr : it->second.snapshot.lock();
}

// What the event log said of a named prefix (not the snapshot itself: holding it would keep it
// from being evicted): stored (info set) or gone (info unset); a removal by replacement is not
// told, as the put that follows tells it.
struct Event {
  std::string name;
  std::optional<PrefixInfo> info;
  bool had_snapshot = false;
};

class KvCacheManagerTest : public ::testing::Test {
 protected:
  std::unique_ptr<KvCacheManager> Make(const KvCacheManagerOptions& options,
                                       KvModelShape shape = Shape()) {
    absl::StatusOr<std::unique_ptr<KvCacheManager>> m =
        KvCacheManager::Create(options, std::move(shape), &clock_);
    EXPECT_TRUE(m.ok()) << m.status();
    if (!m.ok()) return nullptr;
    return std::move(*m);
  }

  // The named prefixes' events heard so far, drained from `m`'s log.
  const std::vector<Event>& Heard(KvCacheManager& m) {
    for (const PrefixEvent& e : m.prefix_store().events().Drain()) {
      if (!e.named || e.cause == RemovalCause::kReplaced) continue;
      Event event{.name = e.name, .had_snapshot = e.kind == PrefixEventKind::kStored};
      if (e.kind == PrefixEventKind::kStored) {
        event.info = PrefixInfo{.name = e.name,
                                .num_tokens = static_cast<int64_t>(e.tokens.size()),
                                .options = e.options};
      }
      events_.push_back(std::move(event));
    }
    return events_;
  }

  base::FakeClock clock_{kStart};
  std::vector<Event> events_;
};

TEST_F(KvCacheManagerTest, CreateValidatesOptionsAndShape) {
  auto error = [](const KvCacheManagerOptions& options, KvModelShape shape,
                  const base::Clock* clock) {
    absl::StatusOr<std::unique_ptr<KvCacheManager>> m =
        KvCacheManager::Create(options, std::move(shape), clock);
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(m.status().message());
  };
  KvCacheManagerOptions options = Options();
  options.prefix_cache_bytes = 0;
  EXPECT_THAT(error(options, Shape(), &clock_), HasSubstr("--prefix-cache-bytes"));
  options = Options(-1, 0);
  EXPECT_THAT(error(options, Shape(), &clock_), HasSubstr("--auto-prefix-min-tokens"));
  for (double rate : {-0.1, 1.5, std::nan("")}) {
    options = Options();
    options.budget.fault_inject_oom_rate = rate;
    EXPECT_THAT(error(options, Shape(), &clock_), HasSubstr("--fault-inject-oom-rate"));
  }
  KvModelShape shape = Shape();
  shape.layers.clear();
  EXPECT_THAT(error(Options(), shape, &clock_), HasSubstr("the model shape needs layers"));
  shape = Shape();
  shape.num_kv_heads = 0;
  EXPECT_THAT(error(Options(), shape, &clock_), HasSubstr("num_kv_heads >= 1"));
  shape = Shape();
  shape.head_dim = 0;
  EXPECT_THAT(error(Options(), shape, &clock_), HasSubstr("head_dim >= 1"));
  shape = Shape();
  shape.bytes_per_element = 0;
  EXPECT_THAT(error(Options(), shape, &clock_), HasSubstr("element size"));
  shape = Shape();
  shape.layers[2] = {LayerType::kSlidingAttention, 1};
  EXPECT_THAT(error(Options(), shape, &clock_),
              HasSubstr("layer 2 is sliding_attention with a window of 1 tokens"));
  shape = Shape();
  shape.fingerprint = "";
  EXPECT_THAT(error(Options(), shape, &clock_), HasSubstr("model_fingerprint"));
  EXPECT_THAT(error(Options(), Shape(), nullptr), HasSubstr("clock"));

  auto m = Make(Options(123456));
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->Stats().budget_limit, 123456);
  EXPECT_EQ(m->Stats().budget_used, 0);
  EXPECT_EQ(m->Stats().budget_limit, 123456);
  EXPECT_THAT(*m->catalog().Get(), IsEmpty());
}

TEST_F(KvCacheManagerTest, AddRefusesBadRequestsAndUnknownIdsAreAnswered) {
  auto m = Make(Options());
  EXPECT_EQ(m->Add(1, Request({})).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m->Add(1, Request({5}, 0)).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(m->Add(1, Request({5, 6})).ok());
  EXPECT_EQ(m->Add(1, Request({7})).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(m->Stats().num_sequences, 1);

  const Admission unknown = m->CanAdmit(99, {});
  EXPECT_EQ(unknown.decision, Decision::kNever);
  EXPECT_EQ(unknown.reason, "sequence 99 is not tracked");
  EXPECT_EQ(m->Allocate(99).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(m->cache(99), nullptr);
  EXPECT_FALSE(m->info(99).has_value());
  EXPECT_EQ(m->CompleteRegistration(99).status().code(), absl::StatusCode::kFailedPrecondition);

  EXPECT_EQ(m->cache(1), nullptr);  // not allocated yet
  ASSERT_TRUE(m->Allocate(1).ok());
  EXPECT_NE(m->cache(1), nullptr);
  EXPECT_EQ(m->Allocate(1).status().code(), absl::StatusCode::kFailedPrecondition);
  // Not a registration.
  EXPECT_EQ(m->CompleteRegistration(1).status().code(), absl::StatusCode::kFailedPrecondition);
  m->Release(99);
  m->Release(1);
  m->Release(1);
  EXPECT_EQ(m->Stats().num_sequences, 0);
}

TEST_F(KvCacheManagerTest, EstimateBytesCountsGranulesAndCapsSlidingLayers) {
  auto m = Make(Options());
  EXPECT_EQ(m->EstimateBytes(0).total_bytes, 0);
  EXPECT_EQ(m->EstimateBytes(0).offloaded_resident_bytes, 0);
  for (int64_t tokens : {1, 10, 64}) {
    EXPECT_EQ(m->EstimateBytes(tokens).total_bytes, 4 * kGranuleBytes) << tokens;  // 32768
    EXPECT_EQ(m->EstimateBytes(tokens).offloaded_resident_bytes, 2 * kGranuleBytes) << tokens;
  }
  EXPECT_EQ(m->EstimateBytes(65).total_bytes, 4 * 2 * kGranuleBytes);  // 65536
  EXPECT_EQ(m->EstimateBytes(65).offloaded_resident_bytes, 2 * 2 * kGranuleBytes);

  // Full, sliding 4, full, chunked 8: 100 tokens round to 128; the windowed layers hold at
  // most their window; offloaded, two of the largest layers are resident.
  auto sliding = Make(Options(), SlidingShape());
  EXPECT_EQ(sliding->EstimateBytes(100).total_bytes, (128 + 4 + 128 + 8) * kTokenBytes);  // 34304
  EXPECT_EQ(sliding->EstimateBytes(100).offloaded_resident_bytes, 2 * 128 * kTokenBytes);
  EXPECT_EQ(sliding->EstimateBytes(3).total_bytes, (64 + 4 + 64 + 8) * kTokenBytes);
}

TEST_F(KvCacheManagerTest, RequestsAdmittedInOnePassCountEachOther) {
  // Each request (10 + 20 new tokens) needs 32768 bytes on the device and 16384 offloaded;
  // 45000 bytes hold one and a fraction.
  auto m = Make(Options(45000));
  ASSERT_TRUE(m->Add(1, Request(Range(1, 10), 20)).ok());
  ASSERT_TRUE(m->Add(2, Request(Range(101, 10), 20)).ok());
  ASSERT_TRUE(m->Add(3, Request(Range(201, 10), 20, NoCache())).ok());

  EXPECT_EQ(m->CanAdmit(1, {}).decision, Decision::kAdmit);
  const Admission b = m->CanAdmit(2, std::vector<SequenceId>{1});
  EXPECT_EQ(b.decision, Decision::kWait);
  EXPECT_EQ(b.reason, "needs 16384 device bytes at least; 12232 are free beside the live caches");
  EXPECT_EQ(m->CanAdmit(2, {}).decision, Decision::kAdmit);
  // A sequence without a cache takes no memory and needs none.
  EXPECT_EQ(m->CanAdmit(2, std::vector<SequenceId>{3}).decision, Decision::kAdmit);
  EXPECT_EQ(m->CanAdmit(3, std::vector<SequenceId>{1, 2}).decision, Decision::kAdmit);

  // Allocated, 1 holds nothing until its first step; then its 32768 bytes leave 12232.
  ASSERT_TRUE(m->Allocate(1).ok());
  EXPECT_EQ(m->Stats().budget_used, 0);
  EXPECT_EQ(m->CanAdmit(2, {}).decision, Decision::kAdmit);
  ASSERT_TRUE(RunStep(*m, {{1, 10}}));
  EXPECT_EQ(m->Stats().budget_used, 4 * kGranuleBytes);
  EXPECT_EQ(m->CanAdmit(2, {}).reason,
            "needs 16384 device bytes at least; 12232 are free beside the live caches");
  m->Release(1);
  EXPECT_EQ(m->Stats().budget_used, 0);
  EXPECT_EQ(m->CanAdmit(2, {}).decision, Decision::kAdmit);
}

TEST_F(KvCacheManagerTest, NeverWhenItCannotFitEvenOffloaded) {
  auto m = Make(Options(16383));
  ASSERT_TRUE(m->Add(1, Request(Range(1, 10), 20)).ok());
  const Admission never = m->CanAdmit(1, {});
  EXPECT_EQ(never.decision, Decision::kNever);
  EXPECT_EQ(never.reason,
            "the request's KV cache needs 16384 device bytes even offloaded (32768 on the "
            "device), above the KV device budget of 16383 bytes (--kv-device-bytes)");
  // One byte more and it fits, offloaded.
  auto fits = Make(Options(16384));
  ASSERT_TRUE(fits->Add(1, Request(Range(1, 10), 20)).ok());
  EXPECT_EQ(fits->CanAdmit(1, {}).decision, Decision::kAdmit);
}

TEST_F(KvCacheManagerTest, StaticCacheCountsEverySlotItPreallocates) {
  // 10 + 5 tokens, but 200 slots: 256 tokens' granules, 131072 bytes, 65536 offloaded.
  auto m = Make(Options(40000));
  ASSERT_TRUE(m->Add(1, Request(Range(1, 10), 5, Spec("static", 200))).ok());
  const Admission never = m->CanAdmit(1, {});
  EXPECT_EQ(never.decision, Decision::kNever);
  EXPECT_THAT(never.reason, HasSubstr("needs 65536 device bytes even offloaded (131072 on"));
}

TEST_F(KvCacheManagerTest, AllocateStepAndReleaseBookkeeping) {
  auto m = Make(Options());
  ASSERT_TRUE(m->Add(1, Request(Range(1, 10), 5)).ok());
  const Allocation allocation = Admit(*m, 1);
  EXPECT_EQ(allocation.cache, m->cache(1));
  EXPECT_EQ(allocation.num_cached_tokens, 0);
  EXPECT_EQ(allocation.prefix_name, "");
  EXPECT_EQ(m->Stats().live.total(), 0);
  EXPECT_EQ(m->info(1)->strategy_name, "dynamic");
  EXPECT_FALSE(m->info(1)->prefill_whole);

  ASSERT_TRUE(RunStep(*m, {{1, 10}}));
  KvCacheManagerStats stats = m->Stats();
  EXPECT_EQ(stats.num_sequences, 1);
  EXPECT_EQ(stats.live, (MemoryUsage{.device_bytes = 4 * kGranuleBytes}));
  EXPECT_EQ(stats.by_strategy.at("dynamic"), (MemoryUsage{.device_bytes = 4 * kGranuleBytes}));
  EXPECT_EQ(stats.budget_used, 4 * kGranuleBytes);
  EXPECT_EQ(stats.prefix_bytes, 0);

  // The prompt (10 tokens, at least the minimum of 8) is kept: 10 x 4 layers x 128 bytes.
  m->OnPrefilled(1);
  ASSERT_TRUE(RunStep(*m, {{1, 1}}));
  stats = m->Stats();
  EXPECT_EQ(stats.prefix_bytes, 5120);
  EXPECT_EQ(stats.prefixes.automatic_entries, 1);
  EXPECT_EQ(m->Stats().budget_used, 4 * kGranuleBytes + 5120);
  EXPECT_EQ(m->cache(1)->SeqLength(), 11);

  m->Release(1);
  EXPECT_EQ(m->Stats().budget_used, 5120);
  stats = m->Stats();
  EXPECT_EQ(stats.num_sequences, 0);
  EXPECT_EQ(stats.live.total(), 0);
  EXPECT_THAT(stats.by_strategy, IsEmpty());
}

TEST_F(KvCacheManagerTest, IdenticalRequestsWaitTheirTurnInsteadOfFailing) {
  // Each needs 32768 bytes (40 + 8 tokens), 16384 offloaded; the kept prompt 20480 bytes.
  // 60000 bytes hold one cache and the snapshot, not two caches.
  constexpr int64_t kSnapshot = 40 * 4 * kTokenBytes;
  auto m = Make(Options(60000));
  const Tokens prompt = Range(1, 40);
  for (SequenceId id : {1, 2, 3, 4}) ASSERT_TRUE(m->Add(id, Request(prompt, 8)).ok());

  // Every scheduling pass asks every waiting sequence in order.
  std::vector<SequenceId> waiting = {1, 2, 3, 4};
  std::vector<SequenceId> order;
  auto pass = [&]() {
    std::vector<SequenceId> admitted;
    std::vector<SequenceId> still;
    for (SequenceId id : waiting) {
      const Admission a = m->CanAdmit(id, admitted);
      EXPECT_NE(a.decision, Decision::kNever) << a.reason;
      if (a.decision == Decision::kAdmit) {
        admitted.push_back(id);
      } else {
        still.push_back(id);
      }
    }
    waiting = still;
    for (SequenceId id : admitted) {
      absl::StatusOr<Allocation> allocation = m->Allocate(id);
      EXPECT_TRUE(allocation.ok()) << allocation.status();
      order.push_back(id);
    }
    return admitted;
  };

  // The first is admitted; the others wait for its prompt rather than compute it too.
  EXPECT_EQ(m->CanAdmit(2, std::vector<SequenceId>{1}).reason,
            "waits for 39 shared prompt tokens another sequence is computing");
  EXPECT_THAT(pass(), ElementsAre(1));
  ASSERT_TRUE(RunStep(*m, {{1, 40}}));
  m->OnPrefilled(1);
  EXPECT_EQ(m->Stats().prefix_bytes, kSnapshot);
  EXPECT_EQ(m->Stats().budget_used, 4 * kGranuleBytes + kSnapshot);

  // Now they wait for memory: 60000 - 53248 = 6752 free.
  const Admission waits = m->CanAdmit(2, {});
  EXPECT_EQ(waits.decision, Decision::kWait);
  EXPECT_EQ(waits.num_cached_tokens, 39);
  EXPECT_EQ(waits.reason,
            "needs 16384 device bytes at least; 6752 are free beside the live caches");
  EXPECT_THAT(pass(), IsEmpty());

  for (SequenceId running : {1, 2, 3, 4}) {
    ASSERT_TRUE(RunStep(*m, {{running, 1}}));
    m->Release(running);
    EXPECT_EQ(m->Stats().budget_used, kSnapshot);
    if (running == 4) break;
    // The next one starts from the kept prompt: only the last prompt token is computed.
    EXPECT_THAT(pass(), ElementsAre(running + 1));
    EXPECT_EQ(m->cache(running + 1)->SeqLength(), 39);
    EXPECT_EQ(m->Stats().budget_used, 4 * kGranuleBytes + kSnapshot);
    ASSERT_TRUE(RunStep(*m, {{running + 1, 1}}));
    m->OnPrefilled(running + 1);  // covered by the kept prompt: nothing new is kept
  }
  EXPECT_THAT(order, ElementsAre(1, 2, 3, 4));
  const PrefixStoreStats prefixes = m->Stats().prefixes;
  EXPECT_EQ(prefixes.automatic_entries, 1);
  EXPECT_EQ(prefixes.automatic_hits, 3);
  EXPECT_EQ(prefixes.automatic_misses, 1);
}

TEST_F(KvCacheManagerTest, UnusedAutomaticSnapshotsGiveWayToLiveSequences) {
  // A kept 40-token prompt (20480 bytes) fills part of a 65536-byte budget; a request
  // needing 49152 bytes offloaded (150 + 43 tokens: 192 per layer) fits only without it.
  auto m = Make(Options(65536));
  Prefill(*m, 1, Request(Range(1000, 40)));
  m->Release(1);
  ASSERT_EQ(m->Stats().budget_used, 20480);
  ASSERT_EQ(m->Stats().prefixes.automatic_entries, 1);

  ASSERT_TRUE(m->Add(2, Request(Range(1, 150), 43)).ok());
  EXPECT_EQ(m->CanAdmit(2, {}).decision, Decision::kAdmit);
  EXPECT_EQ(m->Stats().prefixes.automatic_entries, 1);  // asking changed nothing
  ASSERT_TRUE(m->Allocate(2).ok());
  const KvCacheManagerStats stats = m->Stats();
  EXPECT_EQ(stats.prefixes.automatic_entries, 0);
  EXPECT_EQ(stats.prefixes.evictions, 1);
  EXPECT_EQ(stats.prefix_bytes, 0);
  EXPECT_EQ(m->Stats().budget_used, 0);
}

TEST_F(KvCacheManagerTest, PinnedNamedSnapshotsDoNotGiveWayUnpinnedOnesDo) {
  auto m = Make(Options(65536));
  ASSERT_TRUE(Register(*m, 1, "sys", Range(1000, 40)).ok());
  ASSERT_EQ(m->Stats().budget_used, 20480);
  ASSERT_TRUE(m->Add(2, Request(Range(1, 150), 43)).ok());
  const Admission wait = m->CanAdmit(2, {});
  EXPECT_EQ(wait.decision, Decision::kWait);
  EXPECT_EQ(wait.reason,
            "needs 49152 device bytes at least; 45056 are free beside the live caches");

  // The same prefix unpinned gives way, and its owner hears that it is gone.
  ASSERT_TRUE(Register(*m, 3, "sys", Range(1000, 40), Unpinned()).ok());
  ASSERT_EQ(Heard(*m).size(), 2u);
  EXPECT_EQ(m->CanAdmit(2, {}).decision, Decision::kAdmit);
  ASSERT_TRUE(m->Allocate(2).ok());
  ASSERT_EQ(Heard(*m).size(), 3u);
  EXPECT_EQ(Heard(*m)[2].name, "sys");
  EXPECT_FALSE(Heard(*m)[2].info.has_value());
  EXPECT_EQ(m->Stats().budget_used, 0);
  EXPECT_EQ(Published(*m, "sys"), nullptr);
}

// Issue 27, item 1: a request naming a prefix uses it, and counts a hit on it (which keeps it
// recent), also when an automatic entry extending it serves the longer match; cache_report
// names it.
TEST_F(KvCacheManagerTest, ANamedPrefixServedThroughALongerAutomaticEntryStillCountsItsHit) {
  auto m = Make(Options());
  ASSERT_TRUE(Register(*m, 1, "sys", Range(1, 20), Unpinned()).ok());
  std::shared_ptr<const Snapshot> sys = Published(*m, "sys");
  ASSERT_NE(sys, nullptr);
  for (int q = 0; q < 5; ++q) {
    SCOPED_TRACE(q);
    SequenceRequest r = Request(Concat(Range(1, 20), {500, 501, 502, 510 + q}));
    r.named_prefix = sys;
    r.named_prefix_name = "sys";
    const SequenceId id = 10 + q;
    ASSERT_TRUE(m->Add(id, std::move(r)).ok());
    const Allocation allocation = Admit(*m, id);
    // The first from the named prefix, the others from the first's kept prompt (23 tokens).
    EXPECT_EQ(allocation.num_cached_tokens, q == 0 ? 20 : 23);
    EXPECT_EQ(allocation.prefix_name, "sys");
    ASSERT_TRUE(RunStep(*m, {{id, 24 - allocation.num_cached_tokens}}));
    m->OnPrefilled(id);
    m->Release(id);
    clock_.Advance(absl::Seconds(1));
  }
  const PrefixStoreStats prefixes = m->Stats().prefixes;
  EXPECT_EQ(prefixes.named_hits, 5);
  EXPECT_EQ(prefixes.named_misses, 0);
  EXPECT_EQ(prefixes.automatic_hits, 4);
  m->Maintain();
  const PrefixInfo& info = m->catalog().Get()->at("sys").info;
  EXPECT_EQ(info.hits, 5);
  EXPECT_EQ(info.last_used_at, kStart + absl::Seconds(4));
}

TEST_F(KvCacheManagerTest, NamedPrefixBeatsAShorterAutomaticOne) {
  auto m = Make(Options());
  // An automatic entry sharing the first 12 tokens of the named prefix (a miss when kept).
  Prefill(*m, 2, Request(Concat(Range(1, 12), Range(900, 8))));
  m->Release(2);
  ASSERT_EQ(m->Stats().prefixes.automatic_entries, 1);
  ASSERT_TRUE(Register(*m, 1, "sys", Range(1, 20)).ok());

  SequenceRequest r = Request(Concat(Range(1, 20), {500, 501}));
  r.named_prefix = Published(*m, "sys");
  r.named_prefix_name = "sys";
  ASSERT_NE(r.named_prefix, nullptr);
  ASSERT_TRUE(m->Add(3, std::move(r)).ok());
  EXPECT_EQ(m->CanAdmit(3, {}).num_cached_tokens, 20);
  const Allocation allocation = Admit(*m, 3);
  EXPECT_EQ(allocation.num_cached_tokens, 20);
  EXPECT_EQ(allocation.prefix_name, "sys");
  EXPECT_EQ(m->cache(3)->SeqLength(), 20);
  PrefixStoreStats prefixes = m->Stats().prefixes;
  EXPECT_EQ(prefixes.named_hits, 1);
  EXPECT_EQ(prefixes.automatic_hits, 0);
  EXPECT_EQ(prefixes.automatic_misses, 1);  // sequence 2's
  m->Maintain();
  EXPECT_EQ(m->catalog().Get()->at("sys").info.hits, 1);

  // Deleted while a request holding it waits: the request still starts from it.
  r = Request(Concat(Range(1, 20), {600}));
  r.named_prefix = Published(*m, "sys");
  r.named_prefix_name = "sys";
  ASSERT_TRUE(m->Add(4, std::move(r)).ok());
  ASSERT_TRUE(m->DeletePrefix("sys"));
  const Allocation after_delete = Admit(*m, 4);
  EXPECT_EQ(after_delete.num_cached_tokens, 20);
  EXPECT_EQ(after_delete.prefix_name, "sys");
  for (int i = 0; i < 4; ++i) {
    const auto& layer = static_cast<const DynamicLayer&>(m->cache(4)->layer(i));
    EXPECT_TRUE(at::equal(layer.keys(), Kv(i, 0, 20, false)));
    EXPECT_TRUE(at::equal(layer.values(), Kv(i, 0, 20, true)));
  }
  prefixes = m->Stats().prefixes;
  EXPECT_EQ(prefixes.named_hits, 1);  // no entry to count on any more
  EXPECT_EQ(prefixes.automatic_hits, 0);
}

TEST_F(KvCacheManagerTest, LongerAutomaticPrefixBeatsTheNamedOne) {
  auto m = Make(Options());
  ASSERT_TRUE(Register(*m, 1, "sys", Range(1, 20)).ok());
  const Tokens longer = Concat(Range(1, 20), Range(30, 10));
  Prefill(*m, 2, Request(longer));
  m->Release(2);

  SequenceRequest r = Request(Concat(longer, {77}));
  r.named_prefix = Published(*m, "sys");
  r.named_prefix_name = "sys";
  ASSERT_TRUE(m->Add(3, std::move(r)).ok());
  const Allocation allocation = Admit(*m, 3);
  EXPECT_EQ(allocation.num_cached_tokens, 30);
  // What it reuses includes the prefix it named: the prefix is used (issue 27, item 1).
  EXPECT_EQ(allocation.prefix_name, "sys");
  const auto& layer = static_cast<const DynamicLayer&>(m->cache(3)->layer(2));
  EXPECT_TRUE(at::equal(layer.keys(), Kv(2, 0, 30, false)));
  const PrefixStoreStats prefixes = m->Stats().prefixes;
  EXPECT_EQ(prefixes.named_hits, 2);  // sequence 2 started from "sys"; sequence 3 named it
  EXPECT_EQ(prefixes.automatic_hits, 1);
}

TEST_F(KvCacheManagerTest, SkipPrefixReuseAndNoCacheUseNoPrefixAndCountNothing) {
  auto m = Make(Options());
  ASSERT_TRUE(Register(*m, 1, "sys", Range(1, 20)).ok());
  const PrefixStoreStats before = m->Stats().prefixes;

  SequenceRequest skip = Request(Concat(Range(1, 20), {5}));
  skip.named_prefix = Published(*m, "sys");
  skip.named_prefix_name = "sys";
  skip.skip_prefix_reuse = true;
  ASSERT_TRUE(m->Add(2, std::move(skip)).ok());
  EXPECT_EQ(m->CanAdmit(2, {}).num_cached_tokens, 0);
  const Allocation skipped = Admit(*m, 2);
  EXPECT_EQ(skipped.num_cached_tokens, 0);
  EXPECT_EQ(skipped.prefix_name, "");
  EXPECT_EQ(m->cache(2)->SeqLength(), 0);

  ASSERT_TRUE(m->Add(3, Request(Concat(Range(1, 20), {5}), 4, NoCache())).ok());
  EXPECT_EQ(m->CanAdmit(3, {}).num_cached_tokens, 0);
  const Allocation none = Admit(*m, 3);
  EXPECT_EQ(none.cache, nullptr);
  EXPECT_EQ(none.num_cached_tokens, 0);
  EXPECT_EQ(m->cache(3), nullptr);
  EXPECT_EQ(m->info(3)->strategy_name, "none");

  const PrefixStoreStats after = m->Stats().prefixes;
  EXPECT_EQ(after.named_hits, before.named_hits);
  EXPECT_EQ(after.automatic_hits, before.automatic_hits);
  EXPECT_EQ(after.automatic_misses, before.automatic_misses);
}

TEST_F(KvCacheManagerTest, ExactlyOneHitOrMissPerSequence) {
  auto m = Make(Options());
  ASSERT_TRUE(Register(*m, 1, "sys", Range(1, 20)).ok());
  Prefill(*m, 2, Request(Range(100, 30)));  // a miss
  m->Release(2);
  ASSERT_TRUE(m->Add(3, Request(Concat(Range(1, 20), {9}))).ok());    // a named hit
  ASSERT_TRUE(m->Add(4, Request(Concat(Range(100, 30), {9}))).ok());  // an automatic hit
  ASSERT_TRUE(m->Add(5, Request(Range(5000, 30))).ok());              // a miss
  for (int round = 0; round < 3; ++round) {
    for (SequenceId id : {3, 4, 5}) EXPECT_EQ(m->CanAdmit(id, {}).decision, Decision::kAdmit);
  }
  PrefixStoreStats prefixes = m->Stats().prefixes;
  EXPECT_EQ(prefixes.named_hits, 0);
  EXPECT_EQ(prefixes.automatic_hits, 0);
  EXPECT_EQ(prefixes.automatic_misses, 1);
  for (SequenceId id : {3, 4, 5}) ASSERT_TRUE(m->Allocate(id).ok());
  prefixes = m->Stats().prefixes;
  EXPECT_EQ(prefixes.named_hits, 1);
  EXPECT_EQ(prefixes.automatic_hits, 1);
  EXPECT_EQ(prefixes.automatic_misses, 2);
  EXPECT_EQ(m->cache(3)->SeqLength(), 20);
  EXPECT_EQ(m->cache(4)->SeqLength(), 30);
  EXPECT_EQ(m->cache(5)->SeqLength(), 0);

  // Without automatic reuse, a sequence without a named prefix counts no miss.
  KvCacheManagerOptions options = Options();
  options.auto_prefix_cache = false;
  auto manual = Make(options);
  Prefill(*manual, 1, Request(Range(100, 30)));
  EXPECT_EQ(manual->Stats().prefixes.automatic_misses, 0);
  EXPECT_EQ(manual->Stats().prefixes.automatic_entries, 0);
}

TEST_F(KvCacheManagerTest, WaitsForASharedPrefillInFlight) {
  auto m = Make(Options());
  ASSERT_TRUE(m->Add(1, Request(Range(1, 40), 4)).ok());
  Admit(*m, 1);
  ASSERT_TRUE(m->Add(2, Request(Concat(Range(1, 40), {100, 101, 102}))).ok());
  Admission b = m->CanAdmit(2, {});
  EXPECT_EQ(b.decision, Decision::kWait);
  EXPECT_EQ(b.num_cached_tokens, 0);
  EXPECT_EQ(b.reason, "waits for 40 shared prompt tokens another sequence is computing");
  ASSERT_TRUE(RunStep(*m, {{1, 40}}));
  EXPECT_EQ(m->CanAdmit(2, {}).decision, Decision::kWait);  // computed, not reported yet

  m->OnPrefilled(1);
  b = m->CanAdmit(2, {});
  EXPECT_EQ(b.decision, Decision::kAdmit);
  EXPECT_EQ(b.num_cached_tokens, 40);
  absl::StatusOr<Allocation> allocation = m->Allocate(2);
  ASSERT_TRUE(allocation.ok());
  EXPECT_EQ(allocation->num_cached_tokens, 40);
  KvCache* copy = m->cache(2);
  ASSERT_EQ(copy->SeqLength(), 40);
  for (int i = 0; i < 4; ++i) {
    const auto& mine = static_cast<const DynamicLayer&>(copy->layer(i));
    const auto& theirs = static_cast<const DynamicLayer&>(m->cache(1)->layer(i));
    EXPECT_TRUE(at::equal(mine.keys(), Kv(i, 0, 40, false)));
    EXPECT_TRUE(at::equal(mine.values(), Kv(i, 0, 40, true)));
    EXPECT_FALSE(mine.keys().is_alias_of(theirs.keys()));
  }
}

TEST_F(KvCacheManagerTest, PrefillsThatAreNotKeptMakeNobodyWait) {
  const Tokens shared = Range(1, 40);
  const Tokens longer = Concat(shared, {100, 101});
  struct Case {
    std::string name;
    SequenceRequest running;
    KvModelShape shape;
  };
  std::vector<Case> cases;
  cases.push_back({"static", Request(shared, 4, Spec("static", 64)), Shape()});
  cases.push_back({"quantized", Request(shared, 4, Quanto()), Shape()});
  cases.push_back({"offloaded", Request(shared, 4, Spec("offloaded")), Shape()});
  cases.push_back({"no cache", Request(shared, 4, NoCache()), Shape()});
  cases.push_back({"short prompt", Request(Range(1, 7), 4), Shape()});
  cases.push_back({"sliding model", Request(shared, 4), SlidingShape()});
  SequenceRequest skip = Request(shared, 4);
  skip.skip_prefix_reuse = true;
  cases.push_back({"skip_prefix_reuse", skip, Shape()});
  for (Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto m = Make(Options(), c.shape);
    ASSERT_TRUE(m->Add(1, c.running).ok());
    Admit(*m, 1);
    ASSERT_TRUE(m->Add(2, Request(longer)).ok());
    EXPECT_EQ(m->CanAdmit(2, {}).decision, Decision::kAdmit);
    // Admitted in the same pass, not allocated yet: no wait either.
    ASSERT_TRUE(m->Add(3, c.running).ok());
    EXPECT_EQ(m->CanAdmit(2, std::vector<SequenceId>{3}).decision, Decision::kAdmit);
  }

  // Nor does a sequence that shares fewer than the minimum, or one that computes all anyway.
  auto m = Make(Options());
  ASSERT_TRUE(m->Add(1, Request(shared, 4)).ok());
  Admit(*m, 1);
  ASSERT_TRUE(m->Add(2, Request(Concat(Range(1, 7), {999, 1000}))).ok());
  EXPECT_EQ(m->CanAdmit(2, {}).decision, Decision::kAdmit);
  SequenceRequest own = Request(longer);
  own.skip_prefix_reuse = true;
  ASSERT_TRUE(m->Add(3, std::move(own)).ok());
  EXPECT_EQ(m->CanAdmit(3, {}).decision, Decision::kAdmit);
  // A sequence released mid-prefill is no longer waited for.
  ASSERT_TRUE(m->Add(4, Request(longer)).ok());
  EXPECT_EQ(m->CanAdmit(4, {}).decision, Decision::kWait);
  m->Release(1);
  EXPECT_EQ(m->CanAdmit(4, {}).decision, Decision::kAdmit);
}

TEST_F(KvCacheManagerTest, ARegistrationInFlightMakesOthersWait) {
  for (const KvModelShape& shape : {Shape(), SlidingShape()}) {
    SCOPED_TRACE(shape.layers[1].is_sliding() ? "sliding" : "full");
    auto m = Make(Options(), shape);
    SequenceRequest r = Request(Range(1, 40));
    r.registration = true;
    r.registration_name = "sys";
    ASSERT_TRUE(m->Add(1, std::move(r)).ok());
    Admit(*m, 1);
    ASSERT_TRUE(m->Add(2, Request(Concat(Range(1, 40), {100, 101}))).ok());
    EXPECT_EQ(m->CanAdmit(2, {}).decision, Decision::kWait);
    ASSERT_TRUE(RunStep(*m, {{1, 40}}));
    EXPECT_EQ(m->CanAdmit(2, {}).decision, Decision::kWait);
    ASSERT_TRUE(m->CompleteRegistration(1).ok());
    m->Release(1);
    const Admission b = m->CanAdmit(2, {});
    EXPECT_EQ(b.decision, Decision::kAdmit);
    EXPECT_EQ(b.num_cached_tokens, 40);
    absl::StatusOr<Allocation> allocation = m->Allocate(2);
    ASSERT_TRUE(allocation.ok());
    EXPECT_EQ(allocation->prefix_name, "sys");
    EXPECT_EQ(allocation->num_cached_tokens, 40);
    EXPECT_EQ(m->Stats().prefixes.named_hits, 1);
  }
}

TEST_F(KvCacheManagerTest, RollbackRestoresEveryCacheAndStagedPrefixes) {
  // A limit makes steps reversible (rollback points, sliding layers' past recorded).
  auto m = Make(Options(int64_t{1} << 30));
  ASSERT_TRUE(Register(*m, 1, "sys", Range(1, 12)).ok());
  Prefill(*m, 2, Request(Range(100, 10), 8));  // dynamic
  SequenceRequest q = Request(Concat(Range(1, 12), Range(50, 4)), 8, Quanto());
  q.named_prefix = Published(*m, "sys");
  q.named_prefix_name = "sys";
  ASSERT_TRUE(m->Add(3, std::move(q)).ok());
  EXPECT_TRUE(m->info(3)->prefill_whole);
  const Allocation staged = Admit(*m, 3);
  EXPECT_EQ(staged.num_cached_tokens, 12);
  KvCache* quantized = m->cache(3);
  EXPECT_EQ(quantized->SeqLength(), 12);
  EXPECT_EQ(quantized->layer(0).SeqLength(), 0);  // staged, at full precision
  EXPECT_EQ(quantized->Memory().total(), 0);
  const int64_t used = m->Stats().budget_used;

  const std::vector<SequenceId> ids = {2, 3};
  KvStep step = m->BeginStep(ids);
  Forward(m->cache(2), 1);
  Forward(quantized, 4);
  EXPECT_EQ(quantized->layer(3).SeqLength(), 16);
  EXPECT_GT(m->Stats().budget_used, used);
  EXPECT_THAT(step.Rollback(), IsEmpty());
  EXPECT_EQ(m->cache(2)->SeqLength(), 10);
  EXPECT_EQ(quantized->SeqLength(), 12);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(quantized->layer(i).SeqLength(), 0);
  EXPECT_EQ(m->Stats().budget_used, used);

  // The retry quantizes prefix and suffix together, as a cold prefill of all 16 tokens.
  ASSERT_TRUE(RunStep(*m, {{2, 1}, {3, 4}}));
  auto cold = *MakeCache(Quanto(), Shape().layers);
  Forward(cold.get(), 16);
  for (int i = 0; i < 4; ++i) {
    const auto& a = static_cast<const QuantizedLayer&>(quantized->layer(i));
    const auto& b = static_cast<const QuantizedLayer&>(cold->layer(i));
    EXPECT_EQ(a.num_quantized_tokens(), 16);
    EXPECT_TRUE(at::equal(a.quantized_keys().Codes(), b.quantized_keys().Codes()));
    EXPECT_TRUE(at::equal(a.quantized_values().Dequantize(), b.quantized_values().Dequantize()));
  }
  // Committed: a later rollback returns to the committed lengths.
  KvStep next = m->BeginStep(ids);
  Forward(m->cache(2), 1);
  Forward(quantized, 1);
  EXPECT_THAT(next.Rollback(), IsEmpty());
  EXPECT_EQ(m->cache(2)->SeqLength(), 11);
  EXPECT_EQ(quantized->SeqLength(), 16);
}

TEST_F(KvCacheManagerTest, RollbackRestoresSlidingLayers) {
  auto m = Make(Options(int64_t{1} << 30), SlidingShape());
  Prefill(*m, 1, Request(Range(1, 10), 8));
  std::unique_ptr<KvCache> before = m->cache(1)->Clone();
  KvStep step = m->BeginStep({1});
  Forward(m->cache(1), 3);  // past both windows
  EXPECT_THAT(step.Rollback(), IsEmpty());
  EXPECT_EQ(m->cache(1)->SeqLength(), 10);
  // The next token sees exactly what it would have seen without the failed step.
  for (int i = 0; i < 4; ++i) {
    absl::StatusOr<LayerView> a = m->cache(1)->Update(i, Kv(i, 10, 1, false), Kv(i, 10, 1, true));
    absl::StatusOr<LayerView> b = before->Update(i, Kv(i, 10, 1, false), Kv(i, 10, 1, true));
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->kv_offset, b->kv_offset);
    EXPECT_EQ(a->num_valid, b->num_valid);
    EXPECT_TRUE(at::equal(a->keys.narrow(2, 0, a->num_valid), b->keys.narrow(2, 0, b->num_valid)));
  }
}

TEST_F(KvCacheManagerTest, RollbackThatCannotBeDoneIsReported) {
  // No limit, no fault injection: steps are not made reversible, and a sliding window that
  // filled during the step cannot be rolled back.
  auto m = Make(Options(), SlidingShape());
  Prefill(*m, 1, Request(Range(1, 10), 8));
  Prefill(*m, 2, Request(Range(100, 2), 8));
  KvStep step = m->BeginStep({1, 2});
  Forward(m->cache(1), 1);
  Forward(m->cache(2), 1);  // 3 tokens: its windows have not filled
  EXPECT_THAT(step.Rollback(), ElementsAre(1));
  EXPECT_EQ(m->cache(2)->SeqLength(), 2);
}

TEST_F(KvCacheManagerTest, OutOfMemoryUnderALimitReclaimsSnapshotsThenOffloads) {
  auto m = Make(Options(70000));
  Prefill(*m, 1, Request(Range(1000, 40)));  // kept: 20480 bytes
  m->Release(1);
  ASSERT_EQ(m->Stats().budget_used, 20480);
  ASSERT_TRUE(m->Add(2, Request(Range(1, 60), 10)).ok());  // 65536 bytes, 32768 offloaded
  Admit(*m, 2);
  ASSERT_TRUE(RunStep(*m, {{2, 60}}));
  ASSERT_TRUE(m->Add(3, Request(Range(200, 10), 10)).ok());  // 32768 bytes, 16384 offloaded
  Admit(*m, 3);
  ASSERT_EQ(m->Stats().budget_used, 53248);

  // 3's prefill goes over the limit at its third layer; the rollback leaves 53248 in use.
  ASSERT_FALSE(RunStep(*m, {{2, 1}, {3, 10}}));
  EXPECT_EQ(m->Stats().budget_used, 53248);
  OutOfMemoryAction action = m->OnOutOfMemory({2, 3});
  EXPECT_TRUE(action.reclaimed_snapshots);
  EXPECT_FALSE(action.offloaded.has_value());
  EXPECT_FALSE(action.victim.has_value());
  EXPECT_EQ(m->Stats().prefix_bytes, 0);
  EXPECT_EQ(m->Stats().budget_used, 32768);
  ASSERT_TRUE(RunStep(*m, {{2, 1}, {3, 10}}));
  EXPECT_EQ(m->Stats().budget_used, 65536);

  // 2 outgrows its first granule at its 65th token; nothing is left to reclaim, so the cache
  // with the most device bytes (2: 4 layers, one grown to 128 tokens) goes offloaded.
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(RunStep(*m, {{2, 1}, {3, 1}}));
  ASSERT_EQ(m->cache(2)->SeqLength(), 64);
  ASSERT_FALSE(RunStep(*m, {{2, 1}, {3, 1}}));
  EXPECT_EQ(m->Stats().budget_used, 73728);  // the grown layer keeps its storage
  action = m->OnOutOfMemory({2, 3});
  EXPECT_FALSE(action.reclaimed_snapshots);
  ASSERT_TRUE(action.offloaded.has_value());
  EXPECT_EQ(*action.offloaded, 2);
  EXPECT_EQ(action.offloaded_bytes, 65536);  // its estimate, above its 40960 on the device
  EXPECT_TRUE(m->info(2)->offload_fallback);
  EXPECT_FALSE(m->info(3)->offload_fallback);
  EXPECT_EQ(m->info(2)->strategy_name, "offloaded");
  EXPECT_EQ(m->info(3)->strategy_name, "dynamic");
  EXPECT_EQ(m->Stats().budget_used, 32768);
  ASSERT_TRUE(RunStep(*m, {{2, 1}, {3, 1}}));
  EXPECT_EQ(m->cache(2)->SeqLength(), 65);
  const KvCacheManagerStats stats = m->Stats();
  EXPECT_EQ(stats.num_offload_fallbacks, 1);
  EXPECT_EQ(stats.by_strategy.at("offloaded"), (MemoryUsage{.host_bytes = 4 * 2 * kGranuleBytes}));
  EXPECT_EQ(stats.by_strategy.at("dynamic"), (MemoryUsage{.device_bytes = 4 * kGranuleBytes}));
  EXPECT_EQ(stats.budget_used, 32768);
}

TEST_F(KvCacheManagerTest, OutOfMemoryOffloadsEqualCachesOldestFirst) {
  auto m = Make(Options(int64_t{1} << 20), Shape(2));
  const std::vector<SequenceId> ids = {97, 3, 55, 12, 70, 41, 8, 26};
  for (SequenceId id : ids) {
    ASSERT_TRUE(m->Add(id, Request(Range(100 * static_cast<int>(id), 10), 6)).ok());
    Admit(*m, id);
  }
  std::vector<SequenceId> sorted = ids;
  std::sort(sorted.begin(), sorted.end());
  for (SequenceId expected : sorted) {
    const OutOfMemoryAction action = m->OnOutOfMemory(ids);
    ASSERT_TRUE(action.offloaded.has_value());
    EXPECT_EQ(*action.offloaded, expected);
  }
  EXPECT_FALSE(m->OnOutOfMemory(ids).offloaded.has_value());
}

TEST_F(KvCacheManagerTest, OutOfMemoryWithFaultInjection) {
  // Two layers. Seed 1994 at rate 0.3 makes the 3rd, 7th, 10th and 15th growth fail (the
  // budget's splitmix64 stream); every step below is arranged around that.
  KvCacheManagerOptions options = Options(int64_t{1} << 20);
  options.budget.fault_inject_oom_rate = 0.3;
  options.budget.seed = 1994;
  auto m = Make(options, Shape(2));
  Prefill(*m, 1, Request(Range(1000, 40)));  // growths 1, 2; kept: 10240 bytes
  m->Release(1);
  ASSERT_EQ(m->Stats().prefix_bytes, 10240);
  ASSERT_TRUE(m->Add(2, Request(Range(1, 10), 60)).ok());  // 128 tokens: 32768 bytes
  ASSERT_TRUE(m->Add(3, Request(Range(2000, 10), 6, Spec("static", 15))).ok());  // 16384
  Admit(*m, 2);
  Admit(*m, 3);
  const Work prefill = {{2, 10}, {3, 10}};

  // Growth 3 fails: the unused snapshot goes first.
  ASSERT_FALSE(RunStep(*m, prefill));
  OutOfMemoryAction action = m->OnOutOfMemory({2, 3});
  EXPECT_TRUE(action.reclaimed_snapshots);
  EXPECT_FALSE(action.offloaded.has_value());
  EXPECT_EQ(m->Stats().prefix_bytes, 0);

  // Growth 7 fails: the largest cache (by what it will hold: 32768 against 16384) moves.
  ASSERT_FALSE(RunStep(*m, prefill));
  action = m->OnOutOfMemory({2, 3});
  EXPECT_FALSE(action.reclaimed_snapshots);
  ASSERT_TRUE(action.offloaded.has_value());
  EXPECT_EQ(*action.offloaded, 2);
  EXPECT_EQ(action.offloaded_bytes, 32768);
  EXPECT_EQ(m->info(2)->strategy_name, "offloaded");

  // Growth 10 fails: the static cache moves too.
  ASSERT_FALSE(RunStep(*m, prefill));
  action = m->OnOutOfMemory({2, 3});
  ASSERT_TRUE(action.offloaded.has_value());
  EXPECT_EQ(*action.offloaded, 3);
  EXPECT_EQ(action.offloaded_bytes, 16384);
  EXPECT_EQ(m->info(3)->strategy_name, "offloaded_static");
  EXPECT_TRUE(m->info(3)->offload_fallback);

  // Growths 11-14 pass.
  ASSERT_TRUE(RunStep(*m, prefill));
  EXPECT_EQ(m->Stats().budget_used, 0);
  EXPECT_EQ(m->Stats().live, (MemoryUsage{.host_bytes = 2 * kGranuleBytes + 2 * 15 * kTokenBytes}));

  // Growth 15 fails with every cache offloaded: the sequence of the step holding the most
  // bytes fails alone (2: one layer grown to 128 tokens, the other at 64).
  ASSERT_FALSE(RunStep(*m, {{2, 55}, {3, 1}}));
  EXPECT_EQ(m->cache(2)->SeqLength(), 10);
  action = m->OnOutOfMemory({3, 2});
  EXPECT_FALSE(action.reclaimed_snapshots);
  EXPECT_FALSE(action.offloaded.has_value());
  ASSERT_TRUE(action.victim.has_value());
  EXPECT_EQ(*action.victim, 2);
  EXPECT_EQ(action.reason,
            "out of KV memory even with every cache offloaded: this request holds 24576 bytes of "
            "KV and its step needed more (budget 1048576 bytes, --kv-device-bytes)");
  EXPECT_EQ(m->Stats().injected_faults, 4);
  EXPECT_EQ(m->Stats().num_offload_fallbacks, 2);
}

TEST_F(KvCacheManagerTest, AutomaticCaptureRules) {
  auto m = Make(Options());
  auto kept = [&m]() { return m->Stats().prefixes.automatic_entries; };
  SequenceId id = 1;
  // Not after an offload fallback (the cache is no longer a plain dynamic one).
  ASSERT_TRUE(m->Add(id, Request(Range(600, 10))).ok());
  Admit(*m, id);
  ASSERT_TRUE(RunStep(*m, {{id, 10}}));
  ASSERT_EQ(m->OnOutOfMemory({id}).offloaded, std::optional<SequenceId>(id));
  m->OnPrefilled(id);
  EXPECT_EQ(kept(), 0);

  struct Case {
    std::string name;
    SequenceRequest request;
    int64_t kept;
  };
  SequenceRequest skip = Request(Range(500, 10));
  skip.skip_prefix_reuse = true;
  std::vector<Case> cases = {
      {"short prompt", Request(Range(100, 7)), 0},
      {"static", Request(Range(200, 10), 1, Spec("static", 16)), 0},
      {"quantized", Request(Range(300, 10), 1, Quanto()), 0},
      {"offloaded", Request(Range(400, 10), 1, Spec("offloaded")), 0},
      {"skip_prefix_reuse", skip, 0},
      {"no cache", Request(Range(700, 10), 1, NoCache()), 0},
      {"dynamic, the minimum", Request(Range(1, 8)), 1},
  };
  for (Case& c : cases) {
    SCOPED_TRACE(c.name);
    Prefill(*m, ++id, c.request);
    EXPECT_EQ(kept(), c.kept);
  }
  EXPECT_EQ(m->Stats().prefix_bytes, 8 * 4 * kTokenBytes);
  m->OnPrefilled(id);  // once only
  EXPECT_EQ(kept(), 1);

  // Not on a model with sliding layers, nor with automatic reuse off.
  auto sliding = Make(Options(), SlidingShape());
  Prefill(*sliding, 1, Request(Range(1, 10)));
  EXPECT_EQ(sliding->Stats().prefixes.automatic_entries, 0);
  KvCacheManagerOptions off = Options();
  off.auto_prefix_cache = false;
  auto manual = Make(off);
  Prefill(*manual, 1, Request(Range(1, 10)));
  EXPECT_EQ(manual->Stats().prefixes.automatic_entries, 0);
}

TEST_F(KvCacheManagerTest, CaptureNeedsRoomInTheDeviceBudget) {
  // A 10-token prompt: its cache holds 32768 bytes, its copy 5120.
  auto fits = Make(Options(32768 + 5120));
  Prefill(*fits, 1, Request(Range(1, 10)));
  EXPECT_EQ(fits->Stats().prefixes.automatic_entries, 1);
  EXPECT_EQ(fits->Stats().budget_used, 32768 + 5120);

  auto full = Make(Options(32768 + 5119));
  Prefill(*full, 1, Request(Range(1, 10)));
  EXPECT_EQ(full->Stats().prefixes.automatic_entries, 0);
  EXPECT_EQ(full->Stats().budget_used, 32768);
}

TEST_F(KvCacheManagerTest, RegistrationStoresItsSnapshotUnderItsName) {
  for (const KvModelShape& shape : {Shape(), SlidingShape()}) {
    SCOPED_TRACE(shape.layers[1].is_sliding() ? "sliding" : "full");
    events_.clear();
    auto m = Make(Options(), shape);
    const NamedPrefixOptions options{
        .pinned = true, .ttl = absl::Seconds(10), .cache_implementation = "static"};
    SequenceRequest r = Request(Range(1, 12), 1, Spec("static", 64));
    r.registration = true;
    r.registration_name = "sys";
    r.registration_options = options;
    ASSERT_TRUE(m->Add(1, std::move(r)).ok());
    const Allocation allocation = Admit(*m, 1);
    ASSERT_NE(allocation.cache, nullptr);
    EXPECT_EQ(allocation.num_cached_tokens, 0);
    // A capture cache: every layer keeps every token, whatever the model's layer types.
    for (int i = 0; i < 4; ++i) {
      EXPECT_NE(dynamic_cast<DynamicLayer*>(&allocation.cache->layer(i)), nullptr);
    }
    ASSERT_TRUE(RunStep(*m, {{1, 12}}));
    EXPECT_EQ(m->Stats().budget_used, 4 * kGranuleBytes);  // counted, even without a limit
    absl::StatusOr<PrefixInfo> info = m->CompleteRegistration(1);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->name, "sys");
    EXPECT_EQ(info->num_tokens, 12);
    EXPECT_EQ(info->bytes, 12 * 4 * kTokenBytes);
    EXPECT_EQ(info->fingerprint, "m");
    EXPECT_EQ(info->created_at, kStart);
    EXPECT_EQ(info->last_used_at, kStart);
    EXPECT_EQ(info->hits, 0);
    EXPECT_EQ(info->options, options);
    EXPECT_FALSE(info->referenced);
    EXPECT_EQ(m->cache(1), nullptr);  // the capture cache became the snapshot
    EXPECT_EQ(m->CompleteRegistration(1).status().code(), absl::StatusCode::kFailedPrecondition);
    m->Release(1);
    EXPECT_EQ(m->Stats().prefix_bytes, 12 * 4 * kTokenBytes);
    EXPECT_EQ(m->Stats().budget_used, 12 * 4 * kTokenBytes);

    ASSERT_EQ(Heard(*m).size(), 1u);
    EXPECT_EQ(Heard(*m)[0].name, "sys");
    ASSERT_TRUE(Heard(*m)[0].info.has_value());
    EXPECT_EQ(Heard(*m)[0].info->num_tokens, 12);
    EXPECT_EQ(Heard(*m)[0].info->options, options);
    EXPECT_TRUE(Heard(*m)[0].had_snapshot);

    EXPECT_THAT(*m->catalog().Get(), IsEmpty());  // until published
    std::shared_ptr<const Snapshot> snapshot = Published(*m, "sys");
    ASSERT_NE(snapshot, nullptr);
    EXPECT_THAT(snapshot->token_ids(), ElementsAre(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12));
    for (int i = 0; i < 4; ++i) EXPECT_TRUE(at::equal(snapshot->keys(i), Kv(i, 0, 12, false)));
    EXPECT_EQ(m->catalog().Get()->at("sys").info.bytes, 12 * 4 * kTokenBytes);
  }
}

TEST_F(KvCacheManagerTest, DeletePrefixTellsTheListener) {
  auto m = Make(Options(1 << 20));
  ASSERT_TRUE(Register(*m, 1, "sys", Range(1, 12)).ok());
  ASSERT_EQ(m->Stats().budget_used, 6144);
  ASSERT_NE(Published(*m, "sys"), nullptr);
  EXPECT_TRUE(m->DeletePrefix("sys"));
  ASSERT_EQ(Heard(*m).size(), 2u);
  EXPECT_EQ(Heard(*m)[1].name, "sys");
  EXPECT_FALSE(Heard(*m)[1].info.has_value());
  EXPECT_FALSE(Heard(*m)[1].had_snapshot);
  EXPECT_EQ(m->Stats().budget_used, 0);
  EXPECT_EQ(m->catalog().Get()->size(), 1u);  // the published catalog is a value
  m->Maintain();
  EXPECT_THAT(*m->catalog().Get(), IsEmpty());
  EXPECT_FALSE(m->DeletePrefix("sys"));
  EXPECT_EQ(Heard(*m).size(), 2u);
}

TEST_F(KvCacheManagerTest, EvictedNamedPrefixLeavesTheListenerAndTheCatalog) {
  KvCacheManagerOptions options = Options();
  options.prefix_cache_bytes = 8192;  // one 12-token snapshot (6144 bytes)
  auto m = Make(options);
  ASSERT_TRUE(Register(*m, 1, "u", Range(1, 12), Unpinned()).ok());
  ASSERT_NE(Published(*m, "u"), nullptr);
  std::shared_ptr<const PrefixCatalog> catalog = m->catalog().Get();
  EXPECT_FALSE(catalog->at("u").snapshot.expired());

  Prefill(*m, 2, Request(Range(100, 12)));  // its kept prompt needs the room
  ASSERT_EQ(Heard(*m).size(), 2u);
  EXPECT_EQ(Heard(*m)[1].name, "u");
  EXPECT_FALSE(Heard(*m)[1].info.has_value());
  // The old catalog does not keep the evicted snapshot alive.
  EXPECT_TRUE(catalog->at("u").snapshot.expired());
  EXPECT_EQ(m->Stats().prefixes.evictions, 1);
  EXPECT_EQ(m->Stats().prefix_bytes, 6144);
  m->Maintain();
  EXPECT_THAT(*m->catalog().Get(), IsEmpty());
}

TEST_F(KvCacheManagerTest, TtlExpiryTellsTheListener) {
  auto m = Make(Options(1 << 20));
  ASSERT_TRUE(Register(*m, 1, "t", Range(1, 12), Ttl(absl::Seconds(10))).ok());
  ASSERT_TRUE(Register(*m, 2, "u", Range(100, 12), Ttl(absl::Seconds(20))).ok());
  m->Maintain();
  ASSERT_EQ(m->catalog().Get()->size(), 2u);
  ASSERT_EQ(m->Stats().budget_used, 2 * 6144);

  clock_.Advance(absl::Seconds(10));
  EXPECT_EQ(Heard(*m).size(), 2u);  // nothing runs by itself
  m->Maintain();
  ASSERT_EQ(Heard(*m).size(), 3u);
  EXPECT_EQ(Heard(*m)[2].name, "t");
  EXPECT_FALSE(Heard(*m)[2].info.has_value());
  EXPECT_EQ(m->Stats().budget_used, 6144);
  EXPECT_THAT(*m->catalog().Get(), ElementsAre(::testing::Key("u")));
  EXPECT_EQ(m->Stats().prefixes.expirations, 1);

  // Any call that reaches the store notices an expiry, and the budget follows at once.
  clock_.Advance(absl::Seconds(10));
  ASSERT_TRUE(m->Add(3, Request(Range(100, 20))).ok());
  EXPECT_EQ(m->CanAdmit(3, {}).num_cached_tokens, 0);
  ASSERT_EQ(Heard(*m).size(), 4u);
  EXPECT_EQ(Heard(*m)[3].name, "u");
  EXPECT_EQ(m->Stats().budget_used, 0);
  m->Maintain();
  EXPECT_THAT(*m->catalog().Get(), IsEmpty());
}

// ---- Sessions ----

// The cache's K/V of `layer` at positions [0, n) (the stored tokens of a full-attention layer)
// equal what a cold forward computes there.
void ExpectHoldsPositions(const KvCache& cache, int layer, int64_t n) {
  KvCache& c = const_cast<KvCache&>(cache);
  ASSERT_EQ(c.SeqLength(), n);
  // A zero-token update returns what attention sees: every stored token.
  absl::StatusOr<LayerView> view = c.Update(layer, Kv(layer, n, 0, false), Kv(layer, n, 0, true));
  ASSERT_TRUE(view.ok()) << view.status();
  ASSERT_EQ(view->num_valid, n);
  EXPECT_TRUE(at::equal(view->keys.narrow(2, 0, n), Kv(layer, 0, n, false)));
  EXPECT_TRUE(at::equal(view->values.narrow(2, 0, n), Kv(layer, 0, n, true)));
}

class SessionTest : public KvCacheManagerTest {
 protected:
  std::unique_ptr<KvCacheManager> MakeSessions(KvCacheManagerOptions options = Options(),
                                               KvModelShape shape = Shape()) {
    shape.max_positions = kMaxPositions;
    return Make(options, std::move(shape));
  }

  std::string Open(KvCacheManager& m, CacheSpec cache = Spec(""), absl::Duration ttl = {}) {
    SessionOptions options;
    options.cache = std::move(cache);
    options.ttl = ttl;
    absl::StatusOr<SessionInfo> info = m.sessions().Open(options);
    EXPECT_TRUE(info.ok()) << info.status();
    return info.ok() ? info->id : "";
  }

  static SequenceRequest Turn(const std::string& session, Tokens prompt, int64_t max_new = 4) {
    SequenceRequest r = Request(std::move(prompt), max_new);
    r.session = session;
    return r;
  }

  // Runs a whole turn: add, admit, prefill what the cache does not hold, `generated` decode
  // steps (the last sampled token is not fed back), release with the tokens. Returns the
  // allocation (its cached tokens and reason).
  Allocation RunTurn(KvCacheManager& m, SequenceId id, SequenceRequest request,
                     const Tokens& generated) {
    Tokens tokens = request.prompt;
    EXPECT_TRUE(m.Add(id, std::move(request)).ok());
    tokens = m.info(id)->prompt;
    const Allocation allocation = Admit(m, id);
    const int64_t prompt = static_cast<int64_t>(tokens.size());
    EXPECT_TRUE(RunStep(m, {{id, prompt - allocation.num_cached_tokens}}));
    for (size_t i = 0; i + 1 < generated.size(); ++i) EXPECT_TRUE(RunStep(m, {{id, 1}}));
    tokens.insert(tokens.end(), generated.begin(), generated.end());
    m.Release(id, tokens, /*keep_session_cache=*/true);
    return allocation;
  }
};

TEST_F(SessionTest, TurnsReuseTheHistoryAndCropToTheCommonPrefix) {
  auto m = MakeSessions();
  const std::string id = Open(*m);
  ASSERT_EQ(id.size(), 32u);
  // Turn 1: 10 prompt tokens, 3 generated.
  Allocation a = RunTurn(*m, 1, Turn(id, Range(100, 10)), {7, 8, 9});
  EXPECT_EQ(a.num_cached_tokens, 0);
  absl::StatusOr<SessionInfo> info = m->sessions().Get(id);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->num_tokens, 13);
  EXPECT_EQ(info->cached_tokens, 12);  // the last answer token was never fed
  EXPECT_EQ(info->state, SessionState::kIdle);
  EXPECT_EQ(info->turns, 1);
  // Turn 2 keeps 11 tokens of the history, then differs.
  Tokens prompt = Concat(Concat(Range(100, 10), {7}), Range(300, 5));
  ASSERT_TRUE(m->Add(2, Turn(id, prompt)).ok());
  EXPECT_EQ(m->CanAdmit(2, {}).num_cached_tokens, 11);
  absl::StatusOr<Allocation> turn = m->Allocate(2);
  ASSERT_TRUE(turn.ok());
  EXPECT_EQ(turn->num_cached_tokens, 11);
  EXPECT_EQ(turn->session_recompute_reason, "");
  for (int layer = 0; layer < 4; ++layer) ExpectHoldsPositions(*turn->cache, layer, 11);
  EXPECT_EQ(m->sessions().Get(id)->state, SessionState::kRunning);
  m->Release(2, prompt, true);
  EXPECT_EQ(m->Stats().sessions.hits, 1);
}

TEST_F(SessionTest, ASecondTurnWhileOneRunsIsRefusedNamingTheSession) {
  auto m = MakeSessions();
  const std::string id = Open(*m);
  ASSERT_TRUE(m->Add(1, Turn(id, Range(1, 5))).ok());
  absl::Status second = m->Add(2, Turn(id, Range(1, 6)));
  EXPECT_EQ(second.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.message(), HasSubstr(id));
  EXPECT_EQ(m->sessions().Rollback(id, 1).status().code(), absl::StatusCode::kFailedPrecondition);
  m->Release(1);
  EXPECT_TRUE(m->Add(3, Turn(id, Range(1, 6))).ok());
  EXPECT_EQ(m->Add(4, Turn("nope", Range(1, 6))).code(), absl::StatusCode::kNotFound);
}

TEST_F(SessionTest, AppendedTurnsFollowTheHistoryAndTheContextIsChecked) {
  auto m = MakeSessions();
  const std::string id = Open(*m);
  SequenceRequest first = Turn(id, {5, 6});
  first.session_append = true;
  first.first_turn_prompt = {1, 5, 6};  // with a sequence-start token on an empty history
  RunTurn(*m, 1, std::move(first), {9, 9});
  SequenceRequest second = Turn(id, {7});
  second.session_append = true;
  second.first_turn_prompt = {1, 7};
  ASSERT_TRUE(m->Add(2, std::move(second)).ok());
  EXPECT_THAT(m->info(2)->prompt, ElementsAre(1, 5, 6, 9, 9, 7));
  EXPECT_EQ(m->CanAdmit(2, {}).num_cached_tokens, 4);
  m->Release(2);
  SequenceRequest too_long = Turn(id, Range(1, 200), /*max_new=*/100);
  too_long.session_append = true;
  absl::Status refused = m->Add(3, std::move(too_long));
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), HasSubstr("exceed the model's context of 256"));
}

TEST_F(SessionTest, RollbackCropsSlidingLayersThatKeptTheirPast) {
  auto m = MakeSessions(Options(), SlidingShape());
  const std::string id = Open(*m);
  // 20 tokens: far past the sliding window of 4 and the chunk of 8.
  RunTurn(*m, 1, Turn(id, Range(1, 18)), {50, 51, 52});
  ASSERT_EQ(m->sessions().Get(id)->cached_tokens, 20);
  absl::StatusOr<SessionInfo> rolled = m->sessions().Rollback(id, 9);
  ASSERT_TRUE(rolled.ok()) << rolled.status();
  EXPECT_EQ(rolled->num_tokens, 12);
  EXPECT_EQ(rolled->cached_tokens, 12);
  // The next turn continues from the 12 kept tokens.
  Tokens prompt = Concat(Range(1, 12), Range(400, 3));
  ASSERT_TRUE(m->Add(2, Turn(id, prompt)).ok());
  EXPECT_EQ(m->CanAdmit(2, {}).num_cached_tokens, 12);
  absl::StatusOr<Allocation> turn = m->Allocate(2);
  ASSERT_TRUE(turn.ok());
  EXPECT_EQ(turn->cache->SeqLength(), 12);
  ExpectHoldsPositions(*turn->cache, 0, 12);
  m->Release(2);
  EXPECT_EQ(m->sessions().Rollback(id, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(m->sessions().Rollback(id, 13).status().message(),
              HasSubstr("n: must be in [1, 12]"));
}

TEST_F(SessionTest, ALayerThatCannotCropBackMakesTheTurnRecomputeAndSayWhy) {
  auto m = MakeSessions(Options(), SlidingShape());
  const std::string id = Open(*m, Spec("static", 64));
  RunTurn(*m, 1, Turn(id, Range(1, 18)), {50, 51, 52});
  ASSERT_TRUE(m->sessions().Rollback(id, 9).ok());
  Tokens prompt = Concat(Range(1, 12), Range(400, 3));
  ASSERT_TRUE(m->Add(2, Turn(id, prompt)).ok());
  EXPECT_EQ(m->CanAdmit(2, {}).num_cached_tokens, 0);
  absl::StatusOr<Allocation> turn = m->Allocate(2);
  ASSERT_TRUE(turn.ok());
  EXPECT_EQ(turn->num_cached_tokens, 0);
  EXPECT_THAT(turn->session_recompute_reason, HasSubstr("cannot be cropped back 8 tokens"));
  EXPECT_EQ(turn->cache->SeqLength(), 0);
  m->Release(2);
  EXPECT_EQ(m->Stats().sessions.misses, 1);
}

TEST_F(SessionTest, IdleSessionsMoveToTheHostAndBackForTheNextTurn) {
  KvCacheManagerOptions options = Options();
  options.sessions.idle_offload = absl::Seconds(10);
  auto m = MakeSessions(options);
  const std::string id = Open(*m);
  RunTurn(*m, 1, Turn(id, Range(1, 30)), {5, 6});
  m->Maintain();
  const MemoryUsage before = m->sessions().Get(id)->memory;
  EXPECT_GT(before.device_bytes, 0);
  EXPECT_EQ(before.host_bytes, 0);
  clock_.Advance(absl::Seconds(11));
  m->Maintain();
  absl::StatusOr<SessionInfo> idle = m->sessions().Get(id);
  EXPECT_EQ(idle->state, SessionState::kOffloaded);
  EXPECT_EQ(idle->memory.device_bytes, 0);
  EXPECT_EQ(idle->memory.host_bytes, before.device_bytes);
  EXPECT_EQ(m->Stats().sessions.offloaded, 1);
  Tokens prompt = Concat(Range(1, 30), {5, 6, 7});
  ASSERT_TRUE(m->Add(2, Turn(id, prompt)).ok());
  EXPECT_EQ(m->CanAdmit(2, {}).num_cached_tokens, 31);
  absl::StatusOr<Allocation> turn = m->Allocate(2);
  ASSERT_TRUE(turn.ok());
  EXPECT_FALSE(turn->offload_fallback);
  EXPECT_EQ(turn->cache->Memory().host_bytes, 0);
  EXPECT_GT(turn->cache->Memory().device_bytes, 0);
  ExpectHoldsPositions(*turn->cache, 2, 31);
  m->Release(2);
}

TEST_F(SessionTest, TtlsCloseSessionsAndTheBytesBudgetEvictsTheLeastRecentlyUsed) {
  KvCacheManagerOptions options = Options();
  // One session's cache of 20 tokens fits (4 layers x one 64-token granule), two do not.
  options.sessions.cache_bytes = 4 * kGranuleBytes + 1;
  auto m = MakeSessions(options);
  const std::string old_one = Open(*m);
  const std::string new_one = Open(*m);
  const std::string short_lived = Open(*m, Spec(""), absl::Seconds(5));
  RunTurn(*m, 1, Turn(old_one, Range(1, 20)), {3});
  clock_.Advance(absl::Seconds(1));
  RunTurn(*m, 2, Turn(new_one, Range(1, 20)), {3});
  m->Maintain();
  EXPECT_EQ(m->sessions().Get(old_one)->state, SessionState::kEmpty);
  EXPECT_EQ(m->sessions().Get(old_one)->evictions, 1);
  EXPECT_EQ(m->sessions().Get(new_one)->state, SessionState::kIdle);
  EXPECT_EQ(m->Stats().sessions.evictions, 1);
  // A turn on the evicted session recomputes, and says why.
  ASSERT_TRUE(m->Add(3, Turn(old_one, Range(1, 22))).ok());
  EXPECT_EQ(m->CanAdmit(3, {}).num_cached_tokens, 0);
  absl::StatusOr<Allocation> turn = m->Allocate(3);
  ASSERT_TRUE(turn.ok());
  EXPECT_EQ(turn->session_recompute_reason, "the session's cache was evicted");
  m->Release(3);
  // TTL: 5 s after its last use (its creation, 1 s ago).
  clock_.Advance(absl::Seconds(3));
  m->Maintain();
  EXPECT_TRUE(m->sessions().Get(short_lived).ok());
  clock_.Advance(absl::Seconds(2));
  m->Maintain();
  EXPECT_EQ(m->sessions().Get(short_lived).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(m->Stats().sessions.expirations, 1);
  EXPECT_EQ(m->sessions().List().size(), 2u);
}

TEST_F(SessionTest, AFailedTurnKeepsTheHistoryButNotTheCache) {
  auto m = MakeSessions();
  const std::string id = Open(*m);
  RunTurn(*m, 1, Turn(id, Range(1, 10)), {3, 4});
  ASSERT_TRUE(m->Add(2, Turn(id, Concat(Range(1, 10), {3, 4, 5}))).ok());
  Admit(*m, 2);
  m->Release(2, {}, /*keep_session_cache=*/false);
  absl::StatusOr<SessionInfo> info = m->sessions().Get(id);
  EXPECT_EQ(info->num_tokens, 12);
  EXPECT_EQ(info->state, SessionState::kEmpty);
  EXPECT_EQ(m->Stats().budget_used, 0);
}

TEST_F(SessionTest, CloseWaitsForTheRunningTurnAndMaxSessionsIsEnforced) {
  KvCacheManagerOptions options = Options();
  options.sessions.max_sessions = 2;
  auto m = MakeSessions(options);
  const std::string a = Open(*m);
  Open(*m);
  SessionOptions more;
  EXPECT_EQ(m->sessions().Open(more).status().code(), absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(m->Add(1, Turn(a, Range(1, 5))).ok());
  Admit(*m, 1);
  ASSERT_TRUE(m->sessions().Close(a).ok());
  EXPECT_EQ(m->sessions().Get(a).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(m->sessions().directory().Find(a), nullptr);
  EXPECT_EQ(m->sessions().Close(a).code(), absl::StatusCode::kNotFound);
  m->Release(1, Range(1, 6), true);
  EXPECT_EQ(m->Stats().sessions.live, 1);
  EXPECT_EQ(m->Stats().budget_used, 0);
  EXPECT_TRUE(m->sessions().Open(more).ok());
}

// Making room takes prefix snapshots and idle sessions in one retention order: an old idle
// session (one turn, 20 minutes unused: priority 2 x 2^-2) moves to the host before a fresh
// named prefix of class high (priority 4), which stays; then the snapshot, once it is worth
// less than what is left, goes before the session would.
TEST_F(SessionTest, MakingRoomTakesSnapshotsAndIdleSessionsInOneRetentionOrder) {
  constexpr int64_t kSnapshot = 40 * 4 * kTokenBytes;  // 20480
  KvCacheManagerOptions options = Options(/*device_limit_bytes=*/5 * kGranuleBytes + kSnapshot);
  options.sessions.idle_offload = absl::InfiniteDuration();  // only memory pressure moves it
  auto m = MakeSessions(options);
  const std::string id = Open(*m, Spec(""), absl::Hours(10));
  RunTurn(*m, 1, Turn(id, Range(1, 20)), {3});
  ASSERT_EQ(m->Stats().budget_used, 4 * kGranuleBytes);
  clock_.Advance(absl::Minutes(20));
  std::vector<at::Tensor> keys, values;
  for (int i = 0; i < 4; ++i) {
    keys.push_back(Kv(i, 0, 40, false));
    values.push_back(Kv(i, 0, 40, true));
  }
  NamedPrefixOptions high;
  high.pinned = false;
  high.retention = RetentionClass::kHigh;
  ASSERT_TRUE(
      m->prefix_store()
          .PutNamed("sys",
                    *Snapshot::FromTensors(Range(700, 40), "m", std::move(keys), std::move(values)),
                    high)
          .ok());
  m->Maintain();
  ASSERT_EQ(m->Stats().budget_used, 4 * kGranuleBytes + kSnapshot);
  // 8192 bytes free; the request needs 16384 resident at least.
  ASSERT_TRUE(m->Add(2, Request(Range(500, 40), 4)).ok());
  Admit(*m, 2);
  EXPECT_EQ(m->sessions().Get(id)->state, SessionState::kOffloaded);
  EXPECT_TRUE(m->prefix_store().Info("sys").has_value());
  m->Release(2);
  // The session comes back to the device with a turn; an hour after its put the snapshot is
  // worth 4 x 2^-6 and the session (two turns, used 10 minutes ago) 3 x 2^-1: the snapshot
  // goes.
  clock_.Advance(absl::Minutes(50));
  RunTurn(*m, 3, Turn(id, Concat(Range(1, 20), {3, 4})), {5});
  ASSERT_EQ(m->sessions().Get(id)->state, SessionState::kIdle);
  clock_.Advance(absl::Minutes(10));
  ASSERT_TRUE(m->Add(4, Request(Range(900, 40), 4)).ok());
  Admit(*m, 4);
  EXPECT_FALSE(m->prefix_store().Info("sys").has_value());
  EXPECT_EQ(m->sessions().Get(id)->state, SessionState::kIdle);
  m->Release(4);
}

TEST_F(SessionTest, OutOfMemoryMovesIdleSessionsToTheHostBeforeLiveCaches) {
  auto m = MakeSessions(Options(/*device_limit_bytes=*/6 * kGranuleBytes));
  const std::string id = Open(*m);
  RunTurn(*m, 1, Turn(id, Range(1, 20)), {3});
  ASSERT_EQ(m->Stats().budget_used, 4 * kGranuleBytes);
  ASSERT_TRUE(m->Add(2, Request(Range(500, 60))).ok());
  Admit(*m, 2);
  ASSERT_FALSE(RunStep(*m, {{2, 60}}));  // 4 more granules: over the budget
  const OutOfMemoryAction action = m->OnOutOfMemory({2});
  EXPECT_TRUE(action.offloaded_idle_sessions);
  EXPECT_FALSE(action.offloaded.has_value());
  // The idle session's bytes moved, not the live request's, and the step fits now.
  EXPECT_EQ(m->sessions().Get(id)->state, SessionState::kOffloaded);
  EXPECT_TRUE(RunStep(*m, {{2, 60}}));
  EXPECT_FALSE(m->info(2)->offload_fallback);
}
}  // namespace
}  // namespace kvserve::cache

namespace kvserve::cache {
namespace {

// Shared prefix segments: requests on one snapshot read it in place (PrefixKvMode::kShared).

TEST_F(KvCacheManagerTest, PrefixesAreSharedByDefault) {
  EXPECT_EQ(KvCacheManagerOptions{}.prefix_kv_mode, PrefixKvMode::kShared);
  EXPECT_EQ(PrefixKvModeName(PrefixKvMode::kShared), "shared");
  EXPECT_EQ(*ParsePrefixKvMode("copy"), PrefixKvMode::kCopy);
  EXPECT_THAT(std::string(ParsePrefixKvMode("deep").status().message()),
              HasSubstr("prefix_kv_mode must be \"copy\" or \"shared\", got \"deep\""));
}

TEST_F(KvCacheManagerTest, ASharedPrefixIsCountedOnceWhateverTheNumberOfRequests) {
  constexpr int64_t kPrefix = 100;
  const int64_t snapshot_bytes = kPrefix * 4 * kTokenBytes;
  for (PrefixKvMode mode : {PrefixKvMode::kShared, PrefixKvMode::kCopy}) {
    SCOPED_TRACE(PrefixKvModeName(mode));
    KvCacheManagerOptions options = SharedOptions();
    options.prefix_kv_mode = mode;
    auto m = Make(options);
    ASSERT_TRUE(Register(*m, 100, "sys", Range(1, kPrefix)).ok());
    for (SequenceId id = 1; id <= 8; ++id) {
      const Tokens own = Range(static_cast<int32_t>(1000 + 10 * id), 4);
      ASSERT_TRUE(m->Add(id, Request(Concat(Range(1, kPrefix), own), 2)).ok());
      const Allocation allocation = Admit(*m, id);
      EXPECT_EQ(allocation.num_cached_tokens, kPrefix);
      EXPECT_EQ(allocation.prefix_kv_mode, PrefixKvModeName(mode));
      ASSERT_TRUE(RunStep(*m, {{id, 4}}));
      m->OnPrefilled(id);
    }
    const KvCacheManagerStats stats = m->Stats();
    if (mode == PrefixKvMode::kShared) {
      // Eight tails of 4 tokens (one granule per layer) and the prefix once; the prompts are
      // not kept again as automatic entries (each would be one more copy of the prefix).
      EXPECT_EQ(stats.live.device_bytes, 8 * 4 * kGranuleBytes);
      EXPECT_EQ(stats.prefix_bytes, snapshot_bytes);
      EXPECT_EQ(stats.budget_used, 8 * 4 * kGranuleBytes + snapshot_bytes);
    } else {
      // Every cache holds its own 104 tokens (two granules per layer).
      EXPECT_EQ(stats.live.device_bytes, 8 * 4 * 2 * kGranuleBytes);
    }
    for (SequenceId id = 1; id <= 8; ++id) m->Release(id);
    m->Maintain();
    EXPECT_EQ(m->Stats().live.device_bytes, 0);
  }
}

TEST_F(KvCacheManagerTest, TheAdmissionEstimateCountsASharedPrefixOnce) {
  // Room beside the snapshot for what an offloaded cache of 64 tokens keeps on the device (two
  // layers of one granule): a shared prefix's request (11 own tokens) fits, a copy (111) not.
  constexpr int64_t kPrefix = 100;
  const int64_t snapshot_bytes = kPrefix * 4 * kTokenBytes;
  for (PrefixKvMode mode : {PrefixKvMode::kShared, PrefixKvMode::kCopy}) {
    SCOPED_TRACE(PrefixKvModeName(mode));
    KvCacheManagerOptions options = SharedOptions(snapshot_bytes + 2 * kGranuleBytes);
    options.prefix_kv_mode = mode;
    auto m = Make(options);
    ASSERT_TRUE(Register(*m, 100, "sys", Range(1, kPrefix)).ok());
    ASSERT_TRUE(m->Add(1, Request(Concat(Range(1, kPrefix), Range(900, 4)), 8)).ok());
    const Admission admission = m->CanAdmit(1, {});
    EXPECT_EQ(admission.decision,
              mode == PrefixKvMode::kShared ? Decision::kAdmit : Decision::kWait)
        << admission.reason;
  }
}

TEST_F(KvCacheManagerTest, ASnapshotThatCachesReadIsNotEvictedUnderPressure) {
  auto m = Make(SharedOptions());
  ASSERT_TRUE(Register(*m, 100, "sys", Range(1, 20), Unpinned()).ok());
  ASSERT_TRUE(m->Add(1, Request(Concat(Range(1, 20), Range(500, 3)), 4)).ok());
  EXPECT_EQ(Admit(*m, 1).prefix_kv_mode, "shared");
  ASSERT_TRUE(RunStep(*m, {{1, 3}}));
  // Unpinned, but read in place: evicting it would free nothing, so memory pressure skips it
  // and moves on to the live cache.
  const OutOfMemoryAction action = m->OnOutOfMemory(std::vector<SequenceId>{1});
  EXPECT_FALSE(action.reclaimed_snapshots);
  EXPECT_EQ(action.offloaded, std::optional<SequenceId>(1));
  EXPECT_EQ(m->Stats().prefixes.named_entries, 1);
  ASSERT_TRUE(RunStep(*m, {{1, 1}}));  // the offloaded tail still reads the segment
  EXPECT_EQ(m->cache(1)->SeqLength(), 24);
  m->Release(1);
  EXPECT_TRUE(m->OnOutOfMemory({}).reclaimed_snapshots);  // nobody reads it any more
  EXPECT_EQ(m->Stats().prefixes.named_entries, 0);
}

TEST_F(KvCacheManagerTest, ADeletedPrefixStaysCountedUntilItsLastReaderLeaves) {
  auto m = Make(SharedOptions());
  const int64_t snapshot_bytes = 20 * 4 * kTokenBytes;
  ASSERT_TRUE(Register(*m, 100, "sys", Range(1, 20)).ok());
  for (SequenceId id : {1, 2}) {
    ASSERT_TRUE(m->Add(id, Request(Concat(Range(1, 20), Range(500 + 10 * id, 3)), 4)).ok());
    EXPECT_EQ(Admit(*m, id).prefix_kv_mode, "shared");
  }
  ASSERT_TRUE(RunStep(*m, {{1, 3}, {2, 3}}));
  EXPECT_EQ(m->Stats().budget_used, 2 * 4 * kGranuleBytes + snapshot_bytes);
  ASSERT_TRUE(m->DeletePrefix("sys").has_value());
  m->Maintain();
  EXPECT_EQ(m->Stats().prefix_bytes, 0);
  EXPECT_EQ(m->Stats().budget_used, 2 * 4 * kGranuleBytes + snapshot_bytes);  // still read
  ASSERT_TRUE(RunStep(*m, {{1, 1}, {2, 1}}));
  for (int i = 0; i < 4; ++i) {
    // Both caches still read the deleted snapshot's tokens in place.
    const auto& layer = static_cast<const DynamicLayer&>(m->cache(2)->layer(i));
    EXPECT_TRUE(at::equal(layer.keys().narrow(2, 0, 20), Kv(i, 0, 20, false)));
  }
  m->Release(1);
  m->Maintain();
  EXPECT_EQ(m->Stats().budget_used, 4 * kGranuleBytes + snapshot_bytes);
  m->Release(2);
  m->Maintain();
  EXPECT_EQ(m->Stats().budget_used, 0);  // freed after the last reader
}

TEST_F(KvCacheManagerTest, StrategiesThatKeepTheCopySaySo) {
  auto m = Make(SharedOptions());
  ASSERT_TRUE(Register(*m, 100, "sys", Range(1, 20)).ok());
  struct Case {
    CacheSpec cache;
    std::optional<PrefixKvMode> mode;
    std::string expected;
  };
  const std::vector<Case> cases = {{Spec(""), std::nullopt, "shared"},
                                   {Spec(""), PrefixKvMode::kCopy, "copy"},
                                   {Spec("static", 64), std::nullopt, "copy"},
                                   {Spec("offloaded"), std::nullopt, "copy"},
                                   {Quanto(), PrefixKvMode::kShared, "copy"}};
  SequenceId id = 1;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.expected);
    SequenceRequest r = Request(Concat(Range(1, 20), Range(700, 3)), 2, c.cache);
    r.prefix_kv_mode = c.mode;
    ASSERT_TRUE(m->Add(id, std::move(r)).ok());
    EXPECT_EQ(Admit(*m, id).prefix_kv_mode, c.expected);
    EXPECT_EQ(m->cache(id)->SharedPrefixLength(), c.expected == "shared" ? 20 : 0);
    ASSERT_TRUE(RunStep(*m, {{id, 3}}));
    m->Release(id);
    ++id;
  }
  // A model with sliding (window 4) and chunked (8) layers: they read the part of the prefix
  // they keep (the last 3 and 7 tokens), and let it go when their window moves past it.
  auto sliding = Make(SharedOptions(), SlidingShape());
  ASSERT_TRUE(Register(*sliding, 100, "sys", Range(1, 20)).ok());
  ASSERT_TRUE(sliding->Add(1, Request(Concat(Range(1, 20), Range(700, 3)), 2)).ok());
  EXPECT_EQ(Admit(*sliding, 1).prefix_kv_mode, "shared");
  EXPECT_EQ(sliding->cache(1)->layer(1).SharedPrefixLength(), 3);
  EXPECT_EQ(sliding->cache(1)->layer(3).SharedPrefixLength(), 7);
  ASSERT_TRUE(RunStep(*sliding, {{1, 3}}));
  EXPECT_EQ(sliding->cache(1)->layer(0).SharedPrefixLength(), 20);
  EXPECT_EQ(sliding->cache(1)->layer(1).SharedPrefixLength(), 0);
  EXPECT_EQ(sliding->cache(1)->layer(3).SharedPrefixLength(), 4);
  // A static cache on that model keeps its copy in every layer.
  SequenceRequest r = Request(Concat(Range(1, 20), Range(700, 3)), 2, Spec("static", 64));
  ASSERT_TRUE(sliding->Add(2, std::move(r)).ok());
  EXPECT_EQ(Admit(*sliding, 2).prefix_kv_mode, "copy");
}

TEST_F(KvCacheManagerTest, ASessionCropIntoASharedPrefixCopiesWhatItKeeps) {
  auto m = Make(SharedOptions());
  ASSERT_TRUE(Register(*m, 100, "sys", Range(1, 20)).ok());
  ASSERT_TRUE(m->Add(1, Request(Concat(Range(1, 20), Range(700, 3)), 2)).ok());
  EXPECT_EQ(Admit(*m, 1).prefix_kv_mode, "shared");
  ASSERT_TRUE(RunStep(*m, {{1, 3}}));
  KvCache& cache = *m->cache(1);
  ASSERT_TRUE(cache.Crop(-10).ok());  // back to 13 tokens: into the segment
  EXPECT_EQ(cache.SharedPrefixLength(), 0);
  m->Maintain();
  // The snapshot is no longer read: it may be evicted again; the cache holds its own copy.
  EXPECT_EQ(m->Stats().live.device_bytes, 4 * kGranuleBytes);
  ASSERT_TRUE(RunStep(*m, {{1, 1}}));
  for (int i = 0; i < 4; ++i) {
    const auto& layer = static_cast<const DynamicLayer&>(cache.layer(i));
    EXPECT_TRUE(at::equal(layer.keys(), Kv(i, 0, 14, false)));
  }
}

}  // namespace
}  // namespace kvserve::cache
