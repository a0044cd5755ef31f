// Tests for KvCacheManager with snapshot tiers: a device, host and disk hit each load what a
// cold prefill computes; a restart finds automatic prefixes on disk; concurrent sequences on a
// demoted prefix promote it once; a promoted prefix is read in place (shared) and, while read,
// never demoted.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "cache/kv_cache.h"
#include "cache/kv_cache_manager.h"
#include "cache/snapshot.h"

namespace kvserve::cache {
namespace kv_cache_manager_tiers_test {

using Decision = Admission::Decision;
using Tokens = std::vector<int32_t>;

constexpr int kLayers = 2;
constexpr int64_t kHeads = 2;
constexpr int64_t kDim = 4;
constexpr int64_t kPrefix = 32;
// One prefix snapshot: 32 tokens x 2 layers x (keys + values) x 2 heads x 4 dims x 4 bytes.
constexpr int64_t kSnapshotBytes = kPrefix * kLayers * 2 * kHeads * kDim * 4;  // 4,096

// What a forward computes for `layer` at positions [start, start + n): depends only on the
// layer and the position, as a model's K/V for a fixed prompt would.
at::Tensor Kv(int layer, int64_t start, int64_t n, bool values) {
  at::Tensor pos = at::arange(start, start + n, at::kFloat).view({1, 1, n, 1});
  at::Tensor head = at::arange(kHeads, at::kFloat).view({1, kHeads, 1, 1});
  at::Tensor dim = at::arange(kDim, at::kFloat).view({1, 1, 1, kDim});
  return at::sin(pos * 0.37 + head * 1.3 + dim * 0.71 + layer * 2.9 + (values ? 5 : 0))
      .contiguous();
}

Tokens Prefix(int32_t first) {
  Tokens t;
  for (int32_t i = 0; i < kPrefix; ++i) t.push_back(first + i);
  return t;
}

Tokens With(Tokens prefix, int32_t next) {
  prefix.push_back(next);
  return prefix;
}

SequenceRequest Request(Tokens prompt) {
  SequenceRequest r;
  r.prompt = std::move(prompt);
  r.cache = *CacheSpec::Parse("", {}, true);
  return r;
}

class KvCacheManagerTiersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::path(::testing::TempDir()) /
            ("manager_tiers_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A store with room for one prefix; tiers with the given budgets.
  std::unique_ptr<KvCacheManager> Make(int64_t host_bytes, int64_t disk_bytes,
                                       bool auto_prefix_cache = true) {
    KvCacheManagerOptions options;
    options.auto_prefix_cache = auto_prefix_cache;
    options.prefix_cache_bytes = kSnapshotBytes;
    options.auto_prefix_min_tokens = 8;
    options.tiers.host_bytes = host_bytes;
    options.tiers.disk_bytes = disk_bytes;
    options.tiers.disk_dir = dir_;
    options.tiers.log = [](const std::string&) {};
    KvModelShape shape{.layers = std::vector<LayerSpec>(kLayers),
                       .num_kv_heads = kHeads,
                       .head_dim = kDim,
                       .bytes_per_element = 4,
                       .fingerprint = "m"};
    absl::StatusOr<std::unique_ptr<KvCacheManager>> m =
        KvCacheManager::Create(options, std::move(shape), &clock_);
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? *std::move(m) : nullptr;
  }

  // Stores an unpinned named prefix of `tokens` (the K/V a cold prefill computes) of `retention`.
  void PutNamed(KvCacheManager& m, const std::string& name, Tokens tokens,
                RetentionClass retention) {
    std::vector<at::Tensor> keys, values;
    const int64_t n = static_cast<int64_t>(tokens.size());
    for (int i = 0; i < kLayers; ++i) {
      keys.push_back(Kv(i, 0, n, false));
      values.push_back(Kv(i, 0, n, true));
    }
    NamedPrefixOptions options;
    options.pinned = false;
    options.retention = retention;
    ASSERT_TRUE(m.prefix_store()
                    .PutNamed(name,
                              *Snapshot::FromTensors(std::move(tokens), "m", std::move(keys),
                                                     std::move(values)),
                              options)
                    .ok());
    m.Maintain();
  }

  // Prefills `prompt` whole as sequence `id` (kept as an automatic prefix) and releases it.
  void Prefill(KvCacheManager& m, SequenceId id, Tokens prompt) {
    const int64_t n = static_cast<int64_t>(prompt.size());
    ASSERT_TRUE(m.Add(id, Request(std::move(prompt))).ok());
    ASSERT_EQ(m.CanAdmit(id, {}).decision, Decision::kAdmit);
    absl::StatusOr<Allocation> allocation = m.Allocate(id);
    ASSERT_TRUE(allocation.ok());
    Forward(m, id, allocation->num_cached_tokens, n - allocation->num_cached_tokens);
    m.OnPrefilled(id);
    m.Release(id);
  }

  void Forward(KvCacheManager& m, SequenceId id, int64_t start, int64_t n) {
    KvStep step = m.BeginStep(std::vector<SequenceId>{id});
    KvCache* cache = m.cache(id);
    for (int i = 0; i < kLayers; ++i) {
      ASSERT_TRUE(cache->Update(i, Kv(i, start, n, false), Kv(i, start, n, true)).ok());
    }
    step.Commit();
  }

  // Admits `id` once its promotion (if any) is done; Maintain runs as the engine's steps do.
  Allocation AdmitEventually(KvCacheManager& m, SequenceId id) {
    for (int i = 0; i < 10000; ++i) {
      const Admission admission = m.CanAdmit(id, {});
      if (admission.decision == Decision::kAdmit) break;
      EXPECT_EQ(admission.decision, Decision::kWait) << admission.reason;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      m.Maintain();
    }
    absl::StatusOr<Allocation> allocation = m.Allocate(id);
    EXPECT_TRUE(allocation.ok()) << allocation.status();
    return allocation.ok() ? *allocation : Allocation{};
  }

  // The cache of `id` holds exactly the K/V a cold prefill of its first `n` tokens computes.
  void ExpectCold(KvCacheManager& m, SequenceId id, int64_t n) {
    KvCache* cache = m.cache(id);
    ASSERT_NE(cache, nullptr);
    ASSERT_EQ(cache->SeqLength(), n);
    for (int i = 0; i < kLayers; ++i) {
      absl::StatusOr<LayerView> view =
          cache->Update(i, Kv(i, n, 1, false), Kv(i, n, 1, true));  // reads what it holds
      ASSERT_TRUE(view.ok());
      // A shared prefix segment is read in place, before the layer's own columns.
      const at::Tensor keys =
          view->prefix_keys.defined() ? at::cat({view->prefix_keys, view->keys}, 2) : view->keys;
      const at::Tensor values = view->prefix_values.defined()
                                    ? at::cat({view->prefix_values, view->values}, 2)
                                    : view->values;
      EXPECT_TRUE(at::allclose(keys, Kv(i, 0, n + 1, false), 0, 0)) << "layer " << i;
      EXPECT_TRUE(at::allclose(values, Kv(i, 0, n + 1, true), 0, 0)) << "layer " << i;
    }
  }

  // Waits for the tiers' background writes to reach `n`.
  void AwaitDiskWrites(KvCacheManager& m, int64_t n) {
    for (int i = 0; i < 10000 && m.Stats().tiers.disk_writes < n; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_EQ(m.Stats().tiers.disk_writes, n);
  }

  base::FakeClock clock_{absl::FromUnixSeconds(7000)};
  std::string dir_;
};

TEST_F(KvCacheManagerTiersTest, DeviceHostAndDiskHitsLoadWhatAColdRunComputes) {
  auto m = Make(kSnapshotBytes, 0);
  Prefill(*m, 1, Prefix(0));
  // A device hit.
  ASSERT_TRUE(m->Add(2, Request(With(Prefix(0), 7))).ok());
  EXPECT_EQ(AdmitEventually(*m, 2).num_cached_tokens, kPrefix);
  ExpectCold(*m, 2, kPrefix);
  m->Release(2);
  // Another prompt takes the store's room: the first goes to the host tier.
  Prefill(*m, 3, Prefix(1000));
  EXPECT_EQ(m->Stats().tiers.host_entries, 1);
  EXPECT_EQ(m->Stats().tiers.demotions, 1);
  ASSERT_TRUE(m->Add(4, Request(With(Prefix(0), 8))).ok());
  EXPECT_EQ(AdmitEventually(*m, 4).num_cached_tokens, kPrefix);
  ExpectCold(*m, 4, kPrefix);
  EXPECT_EQ(m->Stats().tiers.host_promotions, 1);
  m->Release(4);
  // The budget sees each tier's bytes: the promoted prefix is on the device, the other on host.
  const KvCacheManagerStats stats = m->Stats();
  EXPECT_EQ(stats.prefix_bytes, kSnapshotBytes);
  EXPECT_EQ(stats.tiers.host_bytes, kSnapshotBytes);
}

TEST_F(KvCacheManagerTiersTest, APromotedPrefixIsSharedAndNotDemotedWhileRead) {
  auto m = Make(kSnapshotBytes, 0);
  Prefill(*m, 1, Prefix(0));
  Prefill(*m, 2, Prefix(1000));  // Prefix(0) goes to the host tier
  ASSERT_EQ(m->Stats().tiers.demotions, 1);
  // Promoted from the host tier, then read in place by two sequences.
  for (SequenceId id : {3, 4}) {
    ASSERT_TRUE(m->Add(id, Request(With(Prefix(0), static_cast<int32_t>(id)))).ok());
    const Allocation allocation = AdmitEventually(*m, id);
    EXPECT_EQ(allocation.num_cached_tokens, kPrefix);
    EXPECT_EQ(allocation.prefix_kv_mode, "shared");
    EXPECT_EQ(m->cache(id)->SharedPrefixLength(), kPrefix);
  }
  EXPECT_EQ(m->Stats().tiers.host_promotions, 1);
  ExpectCold(*m, 3, kPrefix);
  // The promotion demoted Prefix(1000); a new prompt needs the store's one room, but the
  // promoted snapshot is read: it stays on the device and is not demoted.
  const int64_t demotions = m->Stats().tiers.demotions;
  Prefill(*m, 5, Prefix(2000));
  EXPECT_EQ(m->Stats().tiers.demotions, demotions);
  EXPECT_EQ(m->Stats().prefix_bytes, kSnapshotBytes);
  m->Release(3);
  m->Release(4);
  // Still on the device: a later request hits it without another promotion.
  ASSERT_TRUE(m->Add(6, Request(With(Prefix(0), 9))).ok());
  EXPECT_EQ(AdmitEventually(*m, 6).num_cached_tokens, kPrefix);
  EXPECT_EQ(m->Stats().tiers.host_promotions, 1);
  ExpectCold(*m, 6, kPrefix);
}

// An unpinned named prefix the device store needs room from goes to the host tier (its tokens,
// name and class) rather than away: the catalog still lists it (on the host), and a prompt
// that starts with it promotes it back as that named prefix.
TEST_F(KvCacheManagerTiersTest, AnEvictedNamedPrefixIsDemotedAndPromotedBackWithItsName) {
  auto m = Make(kSnapshotBytes, 0);
  PutNamed(*m, "t/sys", Prefix(0), RetentionClass::kHigh);
  Prefill(*m, 1, Prefix(1000));  // takes the store's room
  EXPECT_FALSE(m->prefix_store().Info("t/sys").has_value());
  EXPECT_EQ(m->Stats().tiers.host_entries, 1);
  EXPECT_EQ(m->Stats().tiers.demotions, 1);
  m->Maintain();  // publishes the catalog, as each engine step does
  {
    const auto catalog = m->catalog().Get();
    ASSERT_TRUE(catalog->contains("t/sys"));
    const CatalogEntry& entry = catalog->at("t/sys");
    EXPECT_EQ(entry.info.tier, "host");
    EXPECT_EQ(entry.tokens, Prefix(0));
    EXPECT_EQ(entry.info.options.retention, RetentionClass::kHigh);
    EXPECT_EQ(entry.snapshot.lock(), nullptr);
  }
  SequenceRequest request = Request(With(Prefix(0), 7));
  request.prefix_space = "t";
  ASSERT_TRUE(m->Add(2, std::move(request)).ok());
  EXPECT_EQ(AdmitEventually(*m, 2).num_cached_tokens, kPrefix);
  ExpectCold(*m, 2, kPrefix);
  EXPECT_EQ(m->Stats().tiers.host_promotions, 1);
  // Back on the device as the named prefix, unpinned, of class high.
  std::optional<PrefixInfo> info = m->prefix_store().Info("t/sys");
  ASSERT_TRUE(info.has_value());
  EXPECT_FALSE(info->options.pinned);
  EXPECT_EQ(info->options.retention, RetentionClass::kHigh);
  EXPECT_TRUE(m->prefix_store().AutomaticEntries().empty());
  m->Maintain();
  EXPECT_EQ(m->catalog().Get()->at("t/sys").info.tier, "device");
  m->Release(2);
}

// A request that names a demoted prefix (the server sends its tokens, without a snapshot)
// waits for its promotion even with automatic reuse off, and reads it from the store.
TEST_F(KvCacheManagerTiersTest, ARequestNamingADemotedPrefixPromotesIt) {
  auto m = Make(0, 10 * kSnapshotBytes, /*auto_prefix_cache=*/false);
  PutNamed(*m, "sys", Prefix(0), RetentionClass::kNormal);
  PutNamed(*m, "other", Prefix(1000), RetentionClass::kNormal);  // "sys" leaves for disk
  AwaitDiskWrites(*m, 1);
  m->Maintain();
  EXPECT_EQ(m->catalog().Get()->at("sys").info.tier, "disk");
  SequenceRequest request = Request(With(Prefix(0), 7));
  request.named_prefix_name = "sys";
  ASSERT_TRUE(m->Add(3, std::move(request)).ok());
  const Allocation allocation = AdmitEventually(*m, 3);
  EXPECT_EQ(allocation.num_cached_tokens, kPrefix);
  EXPECT_EQ(allocation.prefix_name, "sys");
  ExpectCold(*m, 3, kPrefix);
  EXPECT_EQ(m->Stats().tiers.disk_loads, 1);
  EXPECT_TRUE(m->prefix_store().Info("sys").has_value());
  m->Release(3);
}

// Deleting a prefix a lower tier holds removes it there, its file too.
TEST_F(KvCacheManagerTiersTest, DeletingADemotedPrefixRemovesItFromTheTiers) {
  auto m = Make(0, 10 * kSnapshotBytes);
  PutNamed(*m, "sys", Prefix(0), RetentionClass::kLow);
  PutNamed(*m, "other", Prefix(1000), RetentionClass::kNormal);
  AwaitDiskWrites(*m, 1);
  EXPECT_EQ(m->Stats().tiers.disk_entries, 1);
  std::optional<RemovedPrefix> removed = m->DeletePrefix("sys");
  ASSERT_TRUE(removed.has_value());
  EXPECT_EQ(removed->info.name, "sys");
  EXPECT_EQ(removed->snapshot, nullptr);
  EXPECT_EQ(m->Stats().tiers.disk_entries, 0);
  EXPECT_TRUE(std::filesystem::is_empty(dir_));
  m->Maintain();
  EXPECT_FALSE(m->catalog().Get()->contains("sys"));
  EXPECT_FALSE(m->DeletePrefix("sys").has_value());
}

// A named prefix's file keeps its name and class: after a restart the catalog lists it (on
// disk) and a prompt that starts with it brings it back as that named prefix.
TEST_F(KvCacheManagerTiersTest, RestartFindsNamedPrefixesOnDiskWithTheirClass) {
  {
    auto m = Make(0, 10 * kSnapshotBytes);
    PutNamed(*m, "t/sys", Prefix(0), RetentionClass::kHigh);
    PutNamed(*m, "t/other", Prefix(1000), RetentionClass::kNormal);
    AwaitDiskWrites(*m, 1);
  }
  auto m = Make(0, 10 * kSnapshotBytes);
  const auto catalog = m->catalog().Get();
  ASSERT_TRUE(catalog->contains("t/sys"));
  EXPECT_EQ(catalog->at("t/sys").info.tier, "disk");
  EXPECT_EQ(catalog->at("t/sys").info.options.retention, RetentionClass::kHigh);
  SequenceRequest request = Request(With(Prefix(0), 7));
  request.prefix_space = "t";
  ASSERT_TRUE(m->Add(1, std::move(request)).ok());
  EXPECT_EQ(AdmitEventually(*m, 1).num_cached_tokens, kPrefix);
  ExpectCold(*m, 1, kPrefix);
  std::optional<PrefixInfo> info = m->prefix_store().Info("t/sys");
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->options.retention, RetentionClass::kHigh);
  m->Release(1);
}

TEST_F(KvCacheManagerTiersTest, DiskHitLoadsWhatAColdRunComputes) {
  auto m = Make(0, 10 * kSnapshotBytes);
  Prefill(*m, 1, Prefix(0));
  Prefill(*m, 2, Prefix(1000));  // the first goes to disk
  AwaitDiskWrites(*m, 1);
  ASSERT_TRUE(m->Add(3, Request(With(Prefix(0), 7))).ok());
  // Nothing else runs: CanAdmit waits for the read itself.
  const Admission first = m->CanAdmit(3, {});
  EXPECT_EQ(first.decision, Decision::kAdmit) << first.reason;
  EXPECT_EQ(first.num_cached_tokens, kPrefix);
  EXPECT_EQ(AdmitEventually(*m, 3).num_cached_tokens, kPrefix);
  ExpectCold(*m, 3, kPrefix);
  EXPECT_EQ(m->Stats().tiers.disk_loads, 1);
}

TEST_F(KvCacheManagerTiersTest, ConcurrentSequencesPromoteADemotedPrefixOnce) {
  auto m = Make(0, 10 * kSnapshotBytes);
  Prefill(*m, 1, Prefix(0));
  Prefill(*m, 2, Prefix(1000));
  AwaitDiskWrites(*m, 1);
  // A running sequence: the others wait step by step while the prefix is read.
  ASSERT_TRUE(m->Add(9, Request(Prefix(5000))).ok());
  ASSERT_TRUE(m->Allocate(9).ok());
  for (SequenceId id : {3, 4, 5}) {
    ASSERT_TRUE(m->Add(id, Request(With(Prefix(0), static_cast<int32_t>(id)))).ok());
    // Waits while the read runs (admitted at once when it was quicker than this loop).
    const Admission admission = m->CanAdmit(id, {});
    EXPECT_TRUE(admission.decision == Decision::kWait ||
                (admission.decision == Decision::kAdmit && admission.num_cached_tokens == kPrefix))
        << admission.reason;
  }
  for (SequenceId id : {3, 4, 5}) {
    EXPECT_EQ(AdmitEventually(*m, id).num_cached_tokens, kPrefix);
    ExpectCold(*m, id, kPrefix);
  }
  EXPECT_EQ(m->Stats().tiers.disk_loads, 1);
}

TEST_F(KvCacheManagerTiersTest, RestartFindsAutomaticPrefixesOnDisk) {
  {
    auto m = Make(0, 10 * kSnapshotBytes);
    Prefill(*m, 1, Prefix(0));  // still on the device when the manager goes
  }
  auto m = Make(0, 10 * kSnapshotBytes);
  EXPECT_EQ(m->Stats().tiers.recovered_files, 1);
  ASSERT_TRUE(m->Add(1, Request(With(Prefix(0), 7))).ok());
  EXPECT_EQ(AdmitEventually(*m, 1).num_cached_tokens, kPrefix);
  ExpectCold(*m, 1, kPrefix);
}

TEST_F(KvCacheManagerTiersTest, WithoutTiersAnEvictedPrefixIsGone) {
  auto m = Make(0, 0);
  Prefill(*m, 1, Prefix(0));
  Prefill(*m, 2, Prefix(1000));
  ASSERT_TRUE(m->Add(3, Request(With(Prefix(0), 7))).ok());
  EXPECT_EQ(AdmitEventually(*m, 3).num_cached_tokens, 0);
  EXPECT_EQ(m->Stats().tiers.demotions, 0);
}

}  // namespace kv_cache_manager_tiers_test
}  // namespace kvserve::cache
