// Tests for SnapshotTiers: demotion order (host, then disk, then dropped), retention, refusal
// of bad files, budgets smaller than an entry, a full disk, restarts and single promotion.
#include "cache/snapshot_tiers.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cache/cross_attention_state.h"
#include "cache/dynamic_layer.h"
#include "cache/kv_cache.h"
#include "cache/snapshot.h"

namespace kvserve::cache {
namespace snapshot_tiers_test {

using ::testing::HasSubstr;
using Tokens = std::vector<int32_t>;

const absl::Time kStart = absl::FromUnixSeconds(100000);

// Tokens {first, first + 1, ..., first + 7}.
Tokens Eight(int32_t first) {
  Tokens t;
  for (int32_t i = 0; i < 8; ++i) t.push_back(first + i);
  return t;
}

// Two layers of [1, 2, 8, 4] float32 (1,024 bytes) whose values depend on `salt`.
std::shared_ptr<const Snapshot> MakeSnapshot(Tokens tokens, float salt) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  std::vector<at::Tensor> keys, values;
  for (int layer = 0; layer < 2; ++layer) {
    at::Tensor base = at::arange(2 * n * 4, at::kFloat).view({1, 2, n, 4});
    keys.push_back((base + salt * 100 + layer).contiguous());
    values.push_back((base - salt * 100 - layer).contiguous());
  }
  return *Snapshot::FromTensors(std::move(tokens), "m", std::move(keys), std::move(values));
}

// A prompt that starts with `prefix` and goes on.
Tokens Prompt(const Tokens& prefix) {
  Tokens t = prefix;
  t.push_back(99999);
  return t;
}

class SnapshotTiersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::path(::testing::TempDir()) /
            ("tiers_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<SnapshotTiers> Make(int64_t host_bytes, int64_t disk_bytes,
                                      std::string model = "m") {
    SnapshotTiersOptions options;
    options.host_bytes = host_bytes;
    options.disk_bytes = disk_bytes;
    options.disk_dir = dir_;
    options.identity = {.model_fingerprint = model, .strategy = "s"};
    options.half_life = absl::Seconds(100);
    options.log = [this](const std::string& line) { log_.push_back(line); };
    absl::StatusOr<std::unique_ptr<SnapshotTiers>> tiers =
        SnapshotTiers::Create(std::move(options), &clock_);
    EXPECT_TRUE(tiers.ok()) << tiers.status();
    return tiers.ok() ? *std::move(tiers) : nullptr;
  }

  // Where the entry of `prefix` is now: "host", "disk" or "none".
  std::string Where(SnapshotTiers& tiers, const Tokens& prefix) {
    std::optional<TierMatch> match = tiers.Find("", Prompt(prefix), 1, 0, false);
    if (!match || match->num_tokens != 8) return "none";
    return match->tier == SnapshotTier::kHost ? "host" : "disk";
  }

  // Promotes the entry of `prefix` and waits for it; null when it did not come back.
  std::shared_ptr<const Snapshot> Load(SnapshotTiers& tiers, const Tokens& prefix) {
    std::optional<TierMatch> match = tiers.Find("", Prompt(prefix), 1, 0, false);
    if (!match) return nullptr;
    tiers.Promote(match->id);
    tiers.WaitIdle();
    std::vector<PromotedSnapshot> promoted = tiers.TakePromoted();
    EXPECT_FALSE(tiers.Pending(match->id));
    return promoted.size() == 1 ? promoted[0].snapshot : nullptr;
  }

  int NumFiles() {
    if (!std::filesystem::exists(dir_)) return 0;
    return static_cast<int>(std::distance(std::filesystem::directory_iterator(dir_), {}));
  }

  base::FakeClock clock_{kStart};
  std::string dir_;
  std::vector<std::string> log_;
};

constexpr int64_t kSnapshotBytes = 2 * 2 * (2 * 8 * 4) * 4;  // 1,024

TEST_F(SnapshotTiersTest, CreateValidatesOptions) {
  SnapshotTiersOptions options;
  options.identity.model_fingerprint = "m";
  options.disk_bytes = 10;
  EXPECT_THAT(SnapshotTiers::Create(options, &clock_).status().message(),
              HasSubstr("--prefix-disk-dir"));
  options.disk_bytes = -1;
  EXPECT_THAT(SnapshotTiers::Create(options, &clock_).status().message(),
              HasSubstr("--prefix-disk-bytes"));
  options.disk_bytes = 0;
  options.host_bytes = -1;
  EXPECT_THAT(SnapshotTiers::Create(options, &clock_).status().message(),
              HasSubstr("--prefix-host-bytes"));
}

TEST_F(SnapshotTiersTest, DemotesToHostThenDiskAndDropsLast) {
  // Room for two snapshots on the host and two files on disk.
  auto tiers = Make(2 * kSnapshotBytes, 2 * (kSnapshotBytes + 400));
  for (int i = 0; i < 5; ++i) {
    tiers->Demote("", MakeSnapshot(Eight(100 * i), i), 0);
    clock_.Advance(absl::Seconds(1));
    tiers->WaitIdle();
  }
  // The oldest leave first: 0 and 1 went to disk, then 0's file made room for 2's.
  EXPECT_EQ(Where(*tiers, Eight(0)), "none");
  EXPECT_EQ(Where(*tiers, Eight(100)), "disk");
  EXPECT_EQ(Where(*tiers, Eight(200)), "disk");
  EXPECT_EQ(Where(*tiers, Eight(300)), "host");
  EXPECT_EQ(Where(*tiers, Eight(400)), "host");
  const SnapshotTiersStats stats = tiers->stats();
  EXPECT_EQ(stats.host_entries, 2);
  EXPECT_EQ(stats.host_bytes, 2 * kSnapshotBytes);
  EXPECT_EQ(stats.disk_entries, 2);
  EXPECT_EQ(stats.host_to_disk, 3);
  EXPECT_EQ(stats.disk_writes, 3);
  EXPECT_EQ(stats.dropped, 1);
  EXPECT_EQ(NumFiles(), 2);
}

TEST_F(SnapshotTiersTest, RetentionKeepsWhatIsUsedOverWhatIsRecent) {
  auto tiers = Make(2 * kSnapshotBytes, 0);
  tiers->Demote("", MakeSnapshot(Eight(0), 0), /*hits=*/8);  // old but used
  clock_.Advance(absl::Seconds(10));
  tiers->Demote("", MakeSnapshot(Eight(100), 1), 0);
  clock_.Advance(absl::Seconds(10));
  tiers->Demote("", MakeSnapshot(Eight(200), 2), 0);
  EXPECT_EQ(Where(*tiers, Eight(0)), "host");
  EXPECT_EQ(Where(*tiers, Eight(100)), "none");
  EXPECT_EQ(Where(*tiers, Eight(200)), "host");
  // Ten half-lives later both have decayed; the used one still ranks above the unused one.
  clock_.Advance(absl::Seconds(1000));
  tiers->Demote("", MakeSnapshot(Eight(300), 3), 0);
  EXPECT_EQ(Where(*tiers, Eight(0)), "host");
  EXPECT_EQ(Where(*tiers, Eight(200)), "none");
  // But not above a fresh entry: its hits decayed with its age.
  tiers->Demote("", MakeSnapshot(Eight(400), 4), 0);
  EXPECT_EQ(Where(*tiers, Eight(0)), "none");
  EXPECT_EQ(Where(*tiers, Eight(300)), "host");
  EXPECT_EQ(Where(*tiers, Eight(400)), "host");
}

TEST_F(SnapshotTiersTest, RetentionClassesWeighThePriority) {
  auto tiers = Make(2 * kSnapshotBytes, 0);
  // The oldest is of class high, the next of class low: the low one leaves first (by age alone,
  // the high one would).
  tiers->Demote("", MakeSnapshot(Eight(0), 0), 0, RetentionClass::kHigh);
  clock_.Advance(absl::Seconds(10));
  tiers->Demote("", MakeSnapshot(Eight(100), 1), 0, RetentionClass::kLow);
  clock_.Advance(absl::Seconds(10));
  tiers->Demote("", MakeSnapshot(Eight(200), 2), 0);
  EXPECT_EQ(Where(*tiers, Eight(0)), "host");
  EXPECT_EQ(Where(*tiers, Eight(100)), "none");
  EXPECT_EQ(Where(*tiers, Eight(200)), "host");
  // A promotion hands the class back with the snapshot.
  std::optional<TierMatch> match = tiers->Find("", Prompt(Eight(0)), 1, 0, false);
  ASSERT_TRUE(match.has_value());
  tiers->Promote(match->id);
  std::vector<PromotedSnapshot> promoted = tiers->TakePromoted();
  ASSERT_EQ(promoted.size(), 1u);
  EXPECT_EQ(promoted[0].retention, RetentionClass::kHigh);
}

TEST_F(SnapshotTiersTest, HostAndDiskHitsGiveTheSameTensors) {
  auto tiers = Make(kSnapshotBytes, 10 * kSnapshotBytes);
  auto a = MakeSnapshot(Eight(0), 1);
  auto b = MakeSnapshot(Eight(100), 2);
  tiers->Demote("", a, 0);
  tiers->Demote("", b, 0);  // a leaves for disk
  tiers->WaitIdle();
  ASSERT_EQ(Where(*tiers, Eight(0)), "disk");
  ASSERT_EQ(Where(*tiers, Eight(100)), "host");
  auto from_disk = Load(*tiers, Eight(0));
  auto from_host = Load(*tiers, Eight(100));
  ASSERT_NE(from_disk, nullptr);
  ASSERT_NE(from_host, nullptr);
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(at::equal(from_disk->keys(i), a->keys(i)));
    EXPECT_TRUE(at::equal(from_disk->values(i), a->values(i)));
    EXPECT_TRUE(at::equal(from_host->keys(i), b->keys(i)));
  }
  EXPECT_EQ(tiers->stats().disk_loads, 1);
  EXPECT_EQ(tiers->stats().host_promotions, 1);
  // A host entry leaves the host when promoted; a file stays.
  EXPECT_EQ(Where(*tiers, Eight(100)), "none");
  EXPECT_EQ(Where(*tiers, Eight(0)), "disk");
}

TEST_F(SnapshotTiersTest, ManyPromotionsOfOneEntryLoadItOnce) {
  auto tiers = Make(0, 10 * kSnapshotBytes);
  tiers->Demote("", MakeSnapshot(Eight(0), 1), 0);
  tiers->WaitIdle();
  std::optional<TierMatch> first = tiers->Find("", Prompt(Eight(0)), 1, 0, false);
  std::optional<TierMatch> second = tiers->Find("", Prompt(Eight(0)), 1, 0, false);
  ASSERT_TRUE(first && second);
  ASSERT_EQ(first->id, second->id);
  tiers->Promote(first->id);
  tiers->Promote(second->id);
  tiers->Promote(first->id);
  tiers->WaitIdle();
  EXPECT_EQ(tiers->TakePromoted().size(), 1u);
  EXPECT_EQ(tiers->stats().disk_loads, 1);
}

TEST_F(SnapshotTiersTest, RestartFindsEntriesOnDisk) {
  auto a = MakeSnapshot(Eight(0), 1);
  {
    auto tiers = Make(0, 10 * kSnapshotBytes);
    tiers->Demote("tenant", a, 3);
    tiers->Persist("", MakeSnapshot(Eight(100), 2), 0);
  }  // the destructor finishes the writes
  auto tiers = Make(0, 10 * kSnapshotBytes);
  EXPECT_EQ(tiers->stats().recovered_files, 2);
  EXPECT_EQ(Where(*tiers, Eight(100)), "disk");
  // A tenant's entry is found by that tenant only.
  EXPECT_FALSE(tiers->Find("", Prompt(Eight(0)), 1, 0, false));
  std::optional<TierMatch> match = tiers->Find("tenant", Prompt(Eight(0)), 1, 0, false);
  ASSERT_TRUE(match);
  tiers->Promote(match->id);
  tiers->WaitIdle();
  std::vector<PromotedSnapshot> promoted = tiers->TakePromoted();
  ASSERT_EQ(promoted.size(), 1u);
  EXPECT_EQ(promoted[0].space, "tenant");
  EXPECT_EQ(promoted[0].hits, 3);
  EXPECT_TRUE(at::equal(promoted[0].snapshot->keys(1), a->keys(1)));
}

// A named prefix's entry keeps its name, class and TTL on the host, on disk and across a
// restart; NamedEntries lists it until its TTL runs out, when it leaves every tier.
TEST_F(SnapshotTiersTest, NamedEntriesKeepTheirNameClassAndTtl) {
  PrefixInfo named;
  named.name = "tenant/sys";
  named.created_at = kStart;
  named.options.pinned = false;
  named.options.retention = RetentionClass::kLow;
  named.options.ttl = absl::Minutes(30);
  named.options.cache_implementation = "dynamic";
  {
    auto tiers = Make(kSnapshotBytes, 10 * kSnapshotBytes);
    const uint64_t before = tiers->named_generation();
    tiers->Demote("tenant", MakeSnapshot(Eight(0), 1), 2, RetentionClass::kLow, named);
    tiers->Demote("", MakeSnapshot(Eight(100), 2), 0, RetentionClass::kHigh);
    EXPECT_NE(tiers->named_generation(), before);
    std::vector<DemotedPrefix> listed = tiers->NamedEntries();
    ASSERT_EQ(listed.size(), 1u);  // the automatic entry is not listed
    EXPECT_EQ(listed[0].info.name, "tenant/sys");
    EXPECT_EQ(listed[0].tier, SnapshotTier::kDisk);  // the second took the host's room
    EXPECT_EQ(listed[0].tokens, Eight(0));
    EXPECT_EQ(listed[0].space, "tenant");
  }
  clock_.Advance(absl::Minutes(10));
  auto tiers = Make(0, 10 * kSnapshotBytes);
  EXPECT_EQ(tiers->stats().recovered_files, 2);
  std::vector<DemotedPrefix> listed = tiers->NamedEntries();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].info.name, "tenant/sys");
  EXPECT_EQ(listed[0].info.options.retention, RetentionClass::kLow);
  EXPECT_EQ(listed[0].info.options.ttl, absl::Minutes(30));
  EXPECT_EQ(listed[0].info.options.cache_implementation, "dynamic");
  EXPECT_EQ(listed[0].info.created_at, kStart);
  EXPECT_FALSE(listed[0].info.options.pinned);
  // The automatic entry kept its class: promoted, it says so.
  std::optional<TierMatch> match = tiers->Find("", Prompt(Eight(100)), 1, 0, false);
  ASSERT_TRUE(match);
  tiers->Promote(match->id);
  tiers->WaitIdle();
  std::vector<PromotedSnapshot> promoted = tiers->TakePromoted();
  ASSERT_EQ(promoted.size(), 1u);
  EXPECT_EQ(promoted[0].retention, RetentionClass::kHigh);
  EXPECT_FALSE(promoted[0].named.has_value());
  // Past created_at + ttl the named entry leaves, file and all.
  clock_.Advance(absl::Minutes(21));
  EXPECT_TRUE(tiers->NamedEntries().empty());
  EXPECT_FALSE(tiers->Find("tenant", Prompt(Eight(0)), 1, 0, false));
  EXPECT_EQ(NumFiles(), 1);
  EXPECT_FALSE(tiers->ForgetNamed("tenant/sys").has_value());
}

// An encoder-decoder capture (a BART named prefix, keyed by its encoder input, with a cross
// state that has no file form) is not tiered: dropped as without tiers.
TEST_F(SnapshotTiersTest, EncoderDecoderCapturesAreNotKept) {
  auto tiers = Make(10 * kSnapshotBytes, 10 * kSnapshotBytes);
  std::vector<std::unique_ptr<CacheLayer>> layers;
  for (int i = 0; i < 2; ++i) layers.push_back(std::make_unique<DynamicLayer>());
  KvCache capture(std::move(layers));
  std::shared_ptr<const Snapshot> plain = MakeSnapshot(Eight(0), 1);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(capture.Update(i, plain->keys(i), plain->values(i)).ok());
  auto state = std::make_shared<CrossAttentionState>();
  state->encoder_ids = {7, 8, 9};
  capture.set_cross_attention(state);
  absl::StatusOr<std::shared_ptr<const Snapshot>> snapshot =
      Snapshot::Capture(capture, Eight(0), "m");
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  PrefixInfo named;
  named.name = "summarize";
  named.options.pinned = false;
  tiers->Demote("", *snapshot, 0, RetentionClass::kNormal, named);
  tiers->Persist("", *snapshot, 0);
  tiers->WaitIdle();
  EXPECT_EQ(Where(*tiers, Eight(0)), "none");
  EXPECT_TRUE(tiers->NamedEntries().empty());
  EXPECT_EQ(tiers->stats().demotions, 0);
  EXPECT_EQ(NumFiles(), 0);
  // The same K/V without the cross state is kept.
  tiers->Demote("", plain, 0);
  EXPECT_EQ(Where(*tiers, Eight(0)), "host");
}

TEST_F(SnapshotTiersTest, ForgetNamedRemovesTheEntryAndItsFile) {
  PrefixInfo named;
  named.name = "sys";
  named.created_at = kStart;
  named.options.pinned = false;
  auto tiers = Make(0, 10 * kSnapshotBytes);
  tiers->Demote("", MakeSnapshot(Eight(0), 1), 4, RetentionClass::kNormal, named);
  tiers->WaitIdle();
  EXPECT_EQ(NumFiles(), 1);
  std::optional<PrefixInfo> forgotten = tiers->ForgetNamed("sys");
  ASSERT_TRUE(forgotten.has_value());
  EXPECT_EQ(forgotten->hits, 4);
  EXPECT_EQ(NumFiles(), 0);
  EXPECT_EQ(Where(*tiers, Eight(0)), "none");
  EXPECT_TRUE(tiers->NamedEntries().empty());
}

TEST_F(SnapshotTiersTest, BadFilesAreRefusedLoggedAndRemoved) {
  {
    auto tiers = Make(0, 10 * kSnapshotBytes);
    for (int i = 0; i < 3; ++i) tiers->Demote("", MakeSnapshot(Eight(100 * i), i), 0);
  }
  {
    // Another model's file in the same folder.
    auto foreign = Make(0, 10 * kSnapshotBytes, "other-model");
  }
  ASSERT_EQ(NumFiles(), 0) << "the other model's tiers removed the files";
  log_.clear();
  {
    auto tiers = Make(0, 10 * kSnapshotBytes);
    for (int i = 0; i < 3; ++i) tiers->Demote("", MakeSnapshot(Eight(100 * i), i), 0);
  }
  ASSERT_EQ(NumFiles(), 3);
  auto file_of = [&](int32_t first) { return dir_ + "/" + SnapshotFileName("", Eight(first)); };
  // 0: truncated; 100: corrupt tensors (its header is fine: refused when loaded); 200 intact.
  std::filesystem::resize_file(file_of(0), std::filesystem::file_size(file_of(0)) - 7);
  {
    std::fstream f(file_of(100), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-30, std::ios::end);
    f.put('\x7f');
  }
  std::ofstream(dir_ + "/stray.kvsnap") << "garbage";
  auto tiers = Make(0, 10 * kSnapshotBytes);
  EXPECT_EQ(tiers->stats().recovered_files, 2);
  EXPECT_EQ(tiers->stats().refused_files, 2);
  EXPECT_EQ(Where(*tiers, Eight(0)), "none");
  EXPECT_FALSE(std::filesystem::exists(file_of(0)));
  EXPECT_EQ(Load(*tiers, Eight(100)), nullptr);
  EXPECT_FALSE(std::filesystem::exists(file_of(100)));
  EXPECT_EQ(Where(*tiers, Eight(100)), "none");
  EXPECT_NE(Load(*tiers, Eight(200)), nullptr);
  EXPECT_EQ(tiers->stats().refused_files, 3);
  ASSERT_EQ(log_.size(), 3u);
  EXPECT_THAT(log_[0] + log_[1], HasSubstr("truncated"));
  EXPECT_THAT(log_[2], HasSubstr("checksum"));
}

TEST_F(SnapshotTiersTest, DiskBudgetSmallerThanOneEntry) {
  auto tiers = Make(0, kSnapshotBytes / 2);
  tiers->Demote("", MakeSnapshot(Eight(0), 0), 0);
  tiers->WaitIdle();
  EXPECT_EQ(Where(*tiers, Eight(0)), "none");
  EXPECT_EQ(tiers->stats().too_large, 1);
  EXPECT_EQ(tiers->stats().disk_bytes, 0);
  EXPECT_EQ(NumFiles(), 0);
}

TEST_F(SnapshotTiersTest, FullDiskFailsTheWriteAndForgetsTheEntry) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    rlimit limit{.rlim_cur = 512, .rlim_max = 512};  // smaller than one file
    ::setrlimit(RLIMIT_FSIZE, &limit);
    int code = 0;
    {
      auto tiers = Make(0, 10 * kSnapshotBytes);
      tiers->Demote("", MakeSnapshot(Eight(0), 0), 0);
      tiers->WaitIdle();
      const SnapshotTiersStats stats = tiers->stats();
      if (stats.disk_write_failures != 1) code |= 1;
      if (stats.disk_entries != 0 || stats.disk_bytes != 0) code |= 2;
      if (Where(*tiers, Eight(0)) != "none") code |= 4;
      if (NumFiles() != 0) code |= 8;
      if (log_.size() != 1) code |= 16;
    }
    ::_exit(code);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace snapshot_tiers_test
}  // namespace kvserve::cache
