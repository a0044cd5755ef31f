// Tests for PrefixStore: named entries (idempotence, replacement, deletion, TTL, pinning),
// automatic entries, eviction in retention order under a byte budget, radix lookup and stats,
// Peek/RecordUse, Reclaim, and the event log of what was stored and removed.
#include "cache/prefix_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cache/cross_attention_state.h"
#include "cache/kv_cache.h"
#include "cache/snapshot.h"

namespace kvserve::cache {
namespace prefix_store_test {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using Tokens = std::vector<int32_t>;

constexpr char kModel[] = "model-a";
const absl::Time kStart = absl::FromUnixSeconds(1000);

// 16 bytes per token: one layer, keys and values of [1, 1, n, 2] float32. Element values
// encode the token ids so tests can see which snapshot they hold.
constexpr int64_t kBytesPerToken = 16;

std::shared_ptr<const Snapshot> Snap(const Tokens& tokens,
                                     const std::string& fingerprint = kModel) {
  auto cache = *KvCache::CreateDynamic({LayerSpec{}});
  const int64_t n = static_cast<int64_t>(tokens.size());
  at::Tensor k = at::tensor(std::vector<float>(tokens.begin(), tokens.end()))
                     .view({1, 1, n, 1})
                     .expand({1, 1, n, 2})
                     .contiguous();
  EXPECT_TRUE(cache->Update(0, k, -k).ok());
  absl::StatusOr<std::shared_ptr<const Snapshot>> s =
      Snapshot::Capture(*cache, tokens, fingerprint);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : nullptr;
}

PrefixStoreOptions StoreOptions(int64_t budget_bytes, const std::string& fingerprint = kModel) {
  PrefixStoreOptions options;
  options.budget_bytes = budget_bytes;
  options.model_fingerprint = fingerprint;
  return options;
}

NamedPrefixOptions Named(bool pinned, absl::Duration ttl = absl::InfiniteDuration()) {
  NamedPrefixOptions options;
  options.pinned = pinned;
  options.ttl = ttl;
  return options;
}

class PrefixStoreTest : public ::testing::Test {
 protected:
  std::unique_ptr<PrefixStore> Make(int64_t budget_bytes) {
    PrefixStoreOptions options = StoreOptions(budget_bytes);
    absl::StatusOr<std::unique_ptr<PrefixStore>> store =
        PrefixStore::Create(std::move(options), &clock_);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? std::move(*store) : nullptr;
  }

  base::FakeClock clock_{kStart};
};

// The names of the named entries the store dropped by itself (evicted for room, or past their
// TTL) since the last call, from its event log.
std::vector<std::string> DroppedNames(PrefixStore& store) {
  std::vector<std::string> names;
  for (const PrefixEvent& e : store.events().Drain()) {
    if (e.kind == PrefixEventKind::kRemoved && e.named &&
        (e.cause == RemovalCause::kEvicted || e.cause == RemovalCause::kExpired)) {
      names.push_back(e.name);
    }
  }
  return names;
}

// Whether `tokens` + one more token finds a match of exactly tokens.size() (a probe that
// touches nothing when it misses).
bool Holds(PrefixStore& store, Tokens tokens) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  tokens.push_back(-1);
  return store.Lookup(kSharedSpace, tokens, n, /*allow_partial=*/false).num_tokens == n;
}

TEST_F(PrefixStoreTest, CreateValidatesOptions) {
  EXPECT_EQ(PrefixStore::Create(StoreOptions(0)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PrefixStore::Create(StoreOptions(-5)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PrefixStore::Create(StoreOptions(100, "")).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PrefixStore::Create(StoreOptions(100), nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::unique_ptr<PrefixStore>> real = PrefixStore::Create(StoreOptions(100));
  ASSERT_TRUE(real.ok());
  EXPECT_EQ((*real)->options().budget_bytes, 100);
}

TEST_F(PrefixStoreTest, ListEntriesShowsNamedAndAutomaticWithTheLogNumber) {
  auto store = Make(1000);
  ASSERT_TRUE(store->PutNamed("acme/sys", Snap({1, 2, 3})).ok());
  ASSERT_TRUE(store->PutAutomatic("acme", Snap({7, 8, 9, 10})));
  StoreListing listing = store->ListEntries();
  // The log's "cleared", then the two puts.
  EXPECT_EQ(listing.sequence, 3u);
  ASSERT_EQ(listing.entries.size(), 2u);
  EXPECT_TRUE(listing.entries[0].named);
  EXPECT_EQ(listing.entries[0].name, "acme/sys");
  EXPECT_EQ(listing.entries[0].space, "acme");
  EXPECT_EQ(listing.entries[0].tokens, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_FALSE(listing.entries[1].named);
  EXPECT_EQ(listing.entries[1].space, "acme");
  EXPECT_EQ(listing.entries[1].tokens, (std::vector<int32_t>{7, 8, 9, 10}));
  EXPECT_LT(listing.entries[0].entry_id, listing.entries[1].entry_id);
  ASSERT_TRUE(store->DeleteNamed("acme/sys"));
  listing = store->ListEntries();
  EXPECT_EQ(listing.sequence, 4u);
  EXPECT_EQ(listing.entries.size(), 1u);
}

TEST_F(PrefixStoreTest, PutNamedThenGetAndInfo) {
  auto store = Make(1000);
  absl::StatusOr<PrefixInfo> info = store->PutNamed("sys", Snap({1, 2, 3}));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->name, "sys");
  EXPECT_EQ(info->num_tokens, 3);
  EXPECT_EQ(info->bytes, 3 * kBytesPerToken);
  EXPECT_EQ(info->fingerprint, kModel);
  EXPECT_EQ(info->created_at, kStart);
  EXPECT_EQ(info->hits, 0);
  EXPECT_TRUE(info->options.pinned);
  EXPECT_EQ(info->options.ttl, absl::InfiniteDuration());
  EXPECT_FALSE(info->referenced);

  clock_.Advance(absl::Seconds(5));
  std::shared_ptr<const Snapshot> got = store->GetNamed("sys");
  ASSERT_NE(got, nullptr);
  EXPECT_THAT(got->token_ids(), ElementsAre(1, 2, 3));
  EXPECT_EQ(store->GetNamed("other"), nullptr);

  std::optional<PrefixInfo> now = store->Info("sys");
  ASSERT_TRUE(now.has_value());
  EXPECT_EQ(now->hits, 1);
  EXPECT_EQ(now->created_at, kStart);
  EXPECT_EQ(now->last_used_at, kStart + absl::Seconds(5));
  EXPECT_TRUE(now->referenced);  // `got` holds it
  got.reset();
  EXPECT_FALSE(store->Info("sys")->referenced);
  EXPECT_FALSE(store->Info("other").has_value());

  const PrefixStoreStats stats = store->stats();
  EXPECT_EQ(stats.named_entries, 1);
  EXPECT_EQ(stats.automatic_entries, 0);
  EXPECT_EQ(stats.bytes_used, 3 * kBytesPerToken);
  EXPECT_EQ(stats.budget_bytes, 1000);
  EXPECT_EQ(stats.named_hits, 1);
  EXPECT_EQ(stats.named_misses, 1);
}

TEST_F(PrefixStoreTest, PutNamedValidatesArguments) {
  auto store = Make(1000);
  EXPECT_EQ(store->PutNamed("", Snap({1})).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->PutNamed("a", nullptr).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->PutNamed("a", Snap({1}), Named(true, absl::ZeroDuration())).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->stats().named_entries, 0);
}

TEST_F(PrefixStoreTest, RePutOfTheSameContentIsIdempotent) {
  auto store = Make(1000);
  std::shared_ptr<const Snapshot> first = Snap({1, 2, 3});
  ASSERT_TRUE(store->PutNamed("sys", first).ok());
  clock_.Advance(absl::Seconds(3));
  absl::StatusOr<PrefixInfo> again = store->PutNamed("sys", Snap({1, 2, 3}));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->created_at, kStart);      // the existing entry
  EXPECT_EQ(store->GetNamed("sys"), first);  // and its snapshot
  EXPECT_EQ(store->stats().bytes_used, 3 * kBytesPerToken);
  EXPECT_EQ(store->stats().named_entries, 1);
}

TEST_F(PrefixStoreTest, OtherContentReplacesWhileAReaderKeepsTheOld) {
  auto store = Make(1000);
  ASSERT_TRUE(store->PutNamed("sys", Snap({1, 2, 3})).ok());
  std::shared_ptr<const Snapshot> reader = store->GetNamed("sys");
  ASSERT_NE(reader, nullptr);
  const at::Tensor before = reader->keys(0).clone();

  clock_.Advance(absl::Seconds(2));
  absl::StatusOr<PrefixInfo> replaced = store->PutNamed("sys", Snap({1, 2, 4, 5}));
  ASSERT_TRUE(replaced.ok());
  EXPECT_EQ(replaced->num_tokens, 4);
  EXPECT_EQ(replaced->created_at, kStart + absl::Seconds(2));
  EXPECT_EQ(replaced->hits, 0);
  EXPECT_THAT(store->GetNamed("sys")->token_ids(), ElementsAre(1, 2, 4, 5));
  // The reader's snapshot is intact; the store counts only the new one.
  EXPECT_THAT(reader->token_ids(), ElementsAre(1, 2, 3));
  EXPECT_TRUE(at::equal(reader->keys(0), before));
  EXPECT_EQ(store->stats().bytes_used, 4 * kBytesPerToken);
  // The old tokens are gone from the tree.
  EXPECT_TRUE(store->Lookup(kSharedSpace, Tokens{1, 2, 3, 9}, 1, false).empty());
  PrefixMatch m = store->Lookup(kSharedSpace, Tokens{1, 2, 3, 9}, 1, true);
  EXPECT_EQ(m.num_tokens, 2);
  EXPECT_EQ(m.name, "sys");

  // Same tokens with other options is other content too.
  clock_.Advance(absl::Seconds(2));
  absl::StatusOr<PrefixInfo> unpinned = store->PutNamed("sys", Snap({1, 2, 4, 5}), Named(false));
  ASSERT_TRUE(unpinned.ok());
  EXPECT_FALSE(unpinned->options.pinned);
  EXPECT_EQ(unpinned->created_at, kStart + absl::Seconds(4));
  EXPECT_EQ(store->stats().named_entries, 1);
}

TEST_F(PrefixStoreTest, DeleteWhileInUse) {
  auto store = Make(1000);
  ASSERT_TRUE(store->PutNamed("sys", Snap({1, 2, 3})).ok());
  std::shared_ptr<const Snapshot> reader = store->GetNamed("sys");
  EXPECT_TRUE(store->DeleteNamed("sys"));
  EXPECT_FALSE(store->DeleteNamed("sys"));
  EXPECT_EQ(store->GetNamed("sys"), nullptr);
  EXPECT_TRUE(store->Lookup(kSharedSpace, Tokens{1, 2, 3, 4}, 1, true).empty());
  EXPECT_THAT(reader->token_ids(), ElementsAre(1, 2, 3));
  EXPECT_TRUE(at::equal(reader->keys(0).select(3, 0).flatten(), at::tensor({1.f, 2.f, 3.f})));
  EXPECT_EQ(store->stats().bytes_used, 0);
  EXPECT_EQ(store->stats().named_entries, 0);
}

TEST_F(PrefixStoreTest, AnotherModelsSnapshotIsRefused) {
  auto store = Make(1000);
  absl::StatusOr<PrefixInfo> info = store->PutNamed("sys", Snap({1, 2}, "model-b"));
  EXPECT_EQ(info.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(info.status().message(), HasSubstr("'model-b'"));
  EXPECT_THAT(info.status().message(), HasSubstr("'model-a'"));
  EXPECT_FALSE(store->PutAutomatic(kSharedSpace, Snap({1, 2}, "model-b")));
  EXPECT_EQ(store->stats().named_entries, 0);
  EXPECT_EQ(store->stats().automatic_entries, 0);
}

TEST_F(PrefixStoreTest, EvictionOrderIsLeastRecentlyUsedAmongEqualPriorities) {
  auto store = Make(100);  // three 2-token entries (32 bytes each) fit
  ASSERT_TRUE(store->PutAutomatic(kSharedSpace, Snap({1, 1})));
  ASSERT_TRUE(store->PutAutomatic(kSharedSpace, Snap({2, 2})));
  ASSERT_TRUE(store->PutNamed("c", Snap({3, 3}), Named(false)).ok());
  EXPECT_EQ(store->stats().bytes_used, 96);
  // Use [1 1]: the order becomes [2 2], c, [1 1] (which also has a hit now).
  EXPECT_EQ(store->Lookup(kSharedSpace, Tokens{1, 1, 9}, 1, false).num_tokens, 2);

  ASSERT_TRUE(store->PutAutomatic(kSharedSpace, Snap({4, 4})));  // evicts [2 2]
  EXPECT_FALSE(Holds(*store, {2, 2}));
  EXPECT_EQ(store->stats().evictions, 1);
  ASSERT_TRUE(store->PutAutomatic(kSharedSpace, Snap({5, 5})));  // evicts the unpinned named c
  EXPECT_FALSE(store->Info("c").has_value());
  EXPECT_EQ(store->stats().evictions, 2);
  // [1 1] is the least recently used but its hit ranks it above [4 4], which goes.
  ASSERT_TRUE(store->PutAutomatic(kSharedSpace, Snap({6, 6})));
  EXPECT_FALSE(Holds(*store, {4, 4}));
  EXPECT_EQ(store->stats().evictions, 3);

  EXPECT_TRUE(Holds(*store, {1, 1}));
  EXPECT_TRUE(Holds(*store, {5, 5}));
  EXPECT_TRUE(Holds(*store, {6, 6}));
  const PrefixStoreStats stats = store->stats();
  EXPECT_EQ(stats.automatic_entries, 3);
  EXPECT_EQ(stats.named_entries, 0);
  EXPECT_EQ(stats.bytes_used, 96);
}

// The device store follows the tiers' retention order: hits outweigh recency until they
// decay (half-life 10 minutes by default).
TEST_F(PrefixStoreTest, RetentionOrderKeepsWhatIsUsedOverWhatIsRecent) {
  auto store = Make(100);  // three 2-token entries fit
  ASSERT_TRUE(store->PutAutomatic(kSharedSpace, Snap({1, 1})));
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(store->Lookup(kSharedSpace, Tokens{1, 1, 9}, 1, false).num_tokens, 2);
  }
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(store->PutAutomatic(kSharedSpace, Snap({2, 2})));
  ASSERT_TRUE(store->PutAutomatic(kSharedSpace, Snap({3, 3})));
  // LRU would evict [1 1]; its three hits keep it and [2 2] (older than [3 3]) goes.
  ASSERT_TRUE(store->PutAutomatic(kSharedSpace, Snap({4, 4})));
  PrefixStoreStats stats = store->stats();
  EXPECT_EQ(stats.evictions, 1);
  EXPECT_FALSE(Holds(*store, {2, 2}));
  // Four half-lives on, its priority (1 + 3) / 16 is below that of an entry used once now
  // (by hits alone it would stay).
  clock_.Advance(absl::Minutes(40));
  EXPECT_EQ(store->Lookup(kSharedSpace, Tokens{3, 3, 9}, 1, false).num_tokens, 2);
  EXPECT_EQ(store->Lookup(kSharedSpace, Tokens{4, 4, 9}, 1, false).num_tokens, 2);
  ASSERT_TRUE(store->PutAutomatic(kSharedSpace, Snap({5, 5})));
  EXPECT_FALSE(Holds(*store, {1, 1}));
  EXPECT_TRUE(Holds(*store, {3, 3}));
  EXPECT_TRUE(Holds(*store, {4, 4}));
  EXPECT_TRUE(Holds(*store, {5, 5}));
}

TEST_F(PrefixStoreTest, RetentionClassesOrderEvictionAndEvictedEntriesAreHandedOn) {
  PrefixStoreOptions options = StoreOptions(100);
  struct Handed {
    std::string space;
    Tokens tokens;
    int64_t hits;
    RetentionClass retention;
    std::string name;  // a named entry's qualified name
  };
  std::vector<Handed> handed;
  options.on_evicted = [&handed](AutomaticEntry e) {
    handed.push_back({std::move(e.space),
                      Tokens(e.snapshot->token_ids().begin(), e.snapshot->token_ids().end()),
                      e.hits, e.retention, e.named ? e.named->name : ""});
  };
  auto store = *PrefixStore::Create(std::move(options), &clock_);
  NamedPrefixOptions high = Named(false), low = Named(false);
  high.retention = RetentionClass::kHigh;
  low.retention = RetentionClass::kLow;
  // Oldest first: high, low, an automatic entry (normal).
  ASSERT_TRUE(store->PutNamed("t/high", Snap({1, 1}), high).ok());
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(store->PutNamed("t/low", Snap({2, 2}), low).ok());
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(store->PutAutomatic(kSharedSpace, Snap({3, 3})));
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(store->PutAutomatic(kSharedSpace, Snap({4, 4})));  // low goes first
  EXPECT_FALSE(store->Info("t/low").has_value());
  EXPECT_TRUE(store->Info("t/high").has_value());
  ASSERT_TRUE(store->PutAutomatic(kSharedSpace, Snap({5, 5})));  // then the older normal
  EXPECT_FALSE(Holds(*store, {3, 3}));
  EXPECT_TRUE(store->Info("t/high").has_value());
  // Evicted named prefixes are handed on with their namespace, class and name (a tier keeps
  // them as that named prefix); an automatic entry put back with a class and hits keeps them.
  ASSERT_EQ(handed.size(), 2u);
  EXPECT_EQ(handed[0].space, "t");
  EXPECT_EQ(handed[0].tokens, (Tokens{2, 2}));
  EXPECT_EQ(handed[0].retention, RetentionClass::kLow);
  EXPECT_EQ(handed[0].name, "t/low");
  EXPECT_EQ(handed[1].space, kSharedSpace);
  EXPECT_EQ(handed[1].retention, RetentionClass::kNormal);
  EXPECT_EQ(handed[1].name, "");
  ASSERT_TRUE(store->DeleteNamed("t/high"));
  ASSERT_TRUE(store->PutAutomatic("t", Snap({1, 1}), RetentionClass::kHigh, /*hits=*/2));
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(store->PutAutomatic(kSharedSpace, Snap({6, 6})));
  ASSERT_TRUE(store->PutAutomatic(kSharedSpace, Snap({7, 7})));
  ASSERT_EQ(handed.size(), 4u);
  EXPECT_EQ(handed[2].tokens, (Tokens{4, 4}));
  EXPECT_EQ(handed[3].tokens, (Tokens{5, 5}));
  // The high-class entry with its hits stayed.
  EXPECT_EQ(store->Lookup("t", Tokens{1, 1, 9}, 1, false).num_tokens, 2);
}

TEST_F(PrefixStoreTest, PinnedAndReferencedEntriesAreNeverEvicted) {
  auto store = Make(100);
  ASSERT_TRUE(store->PutNamed("pinned", Snap({1, 1})).ok());
  std::shared_ptr<const Snapshot> held = Snap({2, 2});
  ASSERT_TRUE(store->PutAutomatic(kSharedSpace, held));
  ASSERT_TRUE(store->PutAutomatic(kSharedSpace, Snap({3, 3})));
  // Oldest first: pinned, held, [3 3]; only [3 3] can go.
  ASSERT_TRUE(store->PutAutomatic(kSharedSpace, Snap({4, 4})));
  EXPECT_FALSE(Holds(*store, {3, 3}));
  ASSERT_TRUE(store->PutAutomatic(kSharedSpace, Snap({5, 5})));
  EXPECT_FALSE(Holds(*store, {4, 4}));
  EXPECT_EQ(store->stats().evictions, 2);

  // 64 bytes needed; 4 free + 32 from [5 5]: refused, nothing changed.
  absl::StatusOr<PrefixInfo> big = store->PutNamed("big", Snap({7, 7, 7, 7}));
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(big.status().message()),
              HasSubstr("needs 64 bytes but the prefix cache (budget 100 bytes, "));
  EXPECT_FALSE(store->PutAutomatic(kSharedSpace, Snap({8, 8, 8, 8})));
  EXPECT_EQ(store->stats().evictions, 2);
  EXPECT_EQ(store->stats().bytes_used, 96);
  EXPECT_TRUE(Holds(*store, {5, 5}));

  // Once the reader lets go, [2 2] and then [5 5] make room; the pinned entry stays.
  held.reset();
  ASSERT_TRUE(store->PutNamed("big", Snap({7, 7, 7, 7})).ok());
  EXPECT_EQ(store->stats().evictions, 4);
  EXPECT_NE(store->GetNamed("pinned"), nullptr);
  EXPECT_FALSE(Holds(*store, {2, 2}));
  EXPECT_FALSE(Holds(*store, {5, 5}));
  EXPECT_EQ(store->stats().bytes_used, 96);

  // A snapshot larger than the budget never fits.
  EXPECT_EQ(store->PutNamed("huge", Snap(Tokens(7, 1))).status().code(),
            absl::StatusCode::kResourceExhausted);
}

// A refusal names the budget and the caller's own bytes, never what other tenants hold or the
// whole cache's use (issue 27 item 16).
TEST_F(PrefixStoreTest, ARefusalShowsOnlyTheCallersOwnBytes) {
  auto store = Make(10 * kBytesPerToken);
  ASSERT_TRUE(store->PutNamed("bob/x", Snap({1, 1, 1, 1, 1, 1, 1})).ok());  // 112 bytes, pinned
  ASSERT_TRUE(store->PutNamed("alice/a", Snap({2, 2})).ok());               // 32 bytes, pinned
  absl::StatusOr<PrefixInfo> refused = store->PutNamed("alice/b", Snap({3, 3, 3, 3}));
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  const std::string message(refused.status().message());
  EXPECT_THAT(message, HasSubstr("needs 64 bytes"));
  EXPECT_THAT(message, HasSubstr("budget 160 bytes, 32 held by this namespace"));
  EXPECT_THAT(message, Not(HasSubstr("112")));  // bob's bytes
  EXPECT_THAT(message, Not(HasSubstr("144")));  // the cache's use
  EXPECT_THAT(message, Not(HasSubstr("at most 16")));
}

TEST_F(PrefixStoreTest, ReplacementFreesTheOldBytesFirst) {
  auto store = Make(100);
  ASSERT_TRUE(store->PutNamed("sys", Snap({1, 1, 1, 1})).ok());  // 64 bytes, pinned
  ASSERT_TRUE(store->PutAutomatic(kSharedSpace, Snap({2, 2})));  // 32 bytes
  // 64 new bytes fit only once the old 64 go (4 are free); the automatic entry stays.
  ASSERT_TRUE(store->PutNamed("sys", Snap({3, 3, 3, 3})).ok());
  EXPECT_EQ(store->stats().bytes_used, 96);
  EXPECT_EQ(store->stats().evictions, 0);
  EXPECT_TRUE(Holds(*store, {2, 2}));
}

TEST_F(PrefixStoreTest, OneSnapshotUnderTwoNamesCountsOnce) {
  auto store = Make(100);
  std::shared_ptr<const Snapshot> s = Snap({1, 2, 3});
  ASSERT_TRUE(store->PutNamed("a", s).ok());
  ASSERT_TRUE(store->PutNamed("b", s).ok());
  s.reset();
  EXPECT_EQ(store->stats().bytes_used, 48);
  EXPECT_FALSE(store->Info("a")->referenced);
  EXPECT_TRUE(store->DeleteNamed("a"));
  EXPECT_EQ(store->stats().bytes_used, 48);
  EXPECT_TRUE(store->DeleteNamed("b"));
  EXPECT_EQ(store->stats().bytes_used, 0);
}

TEST_F(PrefixStoreTest, TtlExpiryWithAFakeClock) {
  auto store = Make(1000);
  ASSERT_TRUE(store->PutNamed("t", Snap({1, 2}), Named(true, absl::Seconds(10))).ok());
  ASSERT_TRUE(store->PutNamed("u", Snap({3, 4}), Named(false, absl::Seconds(5))).ok());
  ASSERT_TRUE(store->PutNamed("forever", Snap({5, 6})).ok());
  clock_.Advance(absl::Seconds(4));
  std::shared_ptr<const Snapshot> reader = store->GetNamed("u");
  ASSERT_NE(reader, nullptr);
  clock_.Advance(absl::Seconds(1));  // u reaches its TTL: dropped even though it is held
  std::vector<PrefixInfo> list = store->List();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].name, "forever");
  EXPECT_EQ(list[1].name, "t");
  EXPECT_EQ(store->stats().expirations, 1);
  EXPECT_THAT(reader->token_ids(), ElementsAre(3, 4));

  clock_.Advance(absl::Seconds(4));  // 9 s
  EXPECT_NE(store->GetNamed("t"), nullptr);
  clock_.Advance(absl::Seconds(1));  // 10 s
  EXPECT_EQ(store->GetNamed("t"), nullptr);
  EXPECT_TRUE(store->Lookup(kSharedSpace, Tokens{1, 2, 3}, 1, true).empty());
  const PrefixStoreStats stats = store->stats();
  EXPECT_EQ(stats.expirations, 2);
  EXPECT_EQ(stats.named_entries, 1);
  EXPECT_EQ(stats.bytes_used, 2 * kBytesPerToken);
  EXPECT_EQ(stats.named_hits, 2);
  EXPECT_EQ(stats.named_misses, 1);
  EXPECT_EQ(stats.evictions, 0);
  clock_.Advance(absl::Hours(24 * 365));
  EXPECT_NE(store->GetNamed("forever"), nullptr);
}

TEST_F(PrefixStoreTest, LookupFindsTheLongestMatchAmongSeveral) {
  auto store = Make(10000);
  ASSERT_TRUE(store->PutNamed("sys", Snap({1, 2, 3, 4})).ok());
  ASSERT_TRUE(store->PutAutomatic(kSharedSpace, Snap({1, 2, 3, 4, 5, 6})));
  ASSERT_TRUE(store->PutAutomatic(kSharedSpace, Snap({1, 2, 7})));

  PrefixMatch m = store->Lookup(kSharedSpace, Tokens{1, 2, 3, 4, 5, 6, 7, 8}, 1, true);
  EXPECT_EQ(m.num_tokens, 6);
  EXPECT_FALSE(m.named);
  EXPECT_EQ(m.name, "");
  EXPECT_THAT(m.snapshot->token_ids(), ElementsAre(1, 2, 3, 4, 5, 6));

  // Partial: 5 tokens of the 6-token entry. Boundary only: the named 4-token entry.
  m = store->Lookup(kSharedSpace, Tokens{1, 2, 3, 4, 5, 9}, 1, true);
  EXPECT_EQ(m.num_tokens, 5);
  EXPECT_FALSE(m.named);
  m = store->Lookup(kSharedSpace, Tokens{1, 2, 3, 4, 5, 9}, 1, false);
  EXPECT_EQ(m.num_tokens, 4);
  EXPECT_TRUE(m.named);
  EXPECT_EQ(m.name, "sys");
  EXPECT_EQ(m.snapshot, store->GetNamed("sys"));

  m = store->Lookup(kSharedSpace, Tokens{1, 2, 7, 7}, 1, false);
  EXPECT_EQ(m.num_tokens, 3);
  EXPECT_THAT(m.snapshot->token_ids(), ElementsAre(1, 2, 7));

  // Only the branch point [1 2] matches: partial uses 2 tokens of the entry below along the
  // smallest next token (3: the named entry); boundary mode has no entry ending there.
  m = store->Lookup(kSharedSpace, Tokens{1, 2, 9, 9}, 1, true);
  EXPECT_EQ(m.num_tokens, 2);
  EXPECT_EQ(m.name, "sys");
  EXPECT_TRUE(store->Lookup(kSharedSpace, Tokens{1, 2, 9, 9}, 1, false).empty());
  EXPECT_TRUE(store->Lookup(kSharedSpace, Tokens{5, 1, 2}, 1, true).empty());
}

TEST_F(PrefixStoreTest, LookupLeavesTheLastTokenUncovered) {
  auto store = Make(10000);
  ASSERT_TRUE(store->PutNamed("sys", Snap({1, 2, 3, 4})).ok());
  PrefixMatch m = store->Lookup(kSharedSpace, Tokens{1, 2, 3, 4}, 1, true);
  EXPECT_EQ(m.num_tokens, 3);
  EXPECT_EQ(m.name, "sys");
  EXPECT_TRUE(store->Lookup(kSharedSpace, Tokens{1, 2, 3, 4}, 1, false).empty());
  EXPECT_EQ(store->Lookup(kSharedSpace, Tokens{1, 2, 3, 4, 5}, 1, false).num_tokens, 4);
  EXPECT_TRUE(store->Lookup(kSharedSpace, Tokens{1}, 1, true).empty());
  EXPECT_TRUE(store->Lookup(kSharedSpace, Tokens{}, 0, true).empty());
}

TEST_F(PrefixStoreTest, LookupHonoursMinTokens) {
  auto store = Make(10000);
  ASSERT_TRUE(store->PutNamed("sys", Snap({1, 2, 3, 4})).ok());
  EXPECT_TRUE(store->Lookup(kSharedSpace, Tokens{1, 2, 9}, 3, true).empty());
  EXPECT_EQ(store->Lookup(kSharedSpace, Tokens{1, 2, 9}, 2, true).num_tokens, 2);
  EXPECT_EQ(store->Lookup(kSharedSpace, Tokens{1, 2, 9}, 0, true).num_tokens, 2);
  EXPECT_TRUE(store->Lookup(kSharedSpace, Tokens{1, 2, 3, 4, 5}, 5, false).empty());
  EXPECT_EQ(store->Lookup(kSharedSpace, Tokens{1, 2, 3, 4, 5}, 4, false).num_tokens, 4);
}

TEST_F(PrefixStoreTest, NamedEntriesWinTiesByName) {
  auto store = Make(10000);
  ASSERT_TRUE(store->PutAutomatic(kSharedSpace, Snap({1, 2, 3})));
  ASSERT_TRUE(store->PutNamed("b", Snap({1, 2, 3})).ok());
  ASSERT_TRUE(store->PutNamed("a", Snap({1, 2, 3})).ok());
  PrefixMatch m = store->Lookup(kSharedSpace, Tokens{1, 2, 3, 4}, 1, false);
  EXPECT_TRUE(m.named);
  EXPECT_EQ(m.name, "a");
  EXPECT_EQ(store->Info("a")->hits, 1);
  EXPECT_EQ(store->Info("b")->hits, 0);
}

TEST_F(PrefixStoreTest, HitsAndMissesByKind) {
  auto store = Make(10000);
  ASSERT_TRUE(store->PutNamed("sys", Snap({1, 2, 3})).ok());
  ASSERT_TRUE(store->PutAutomatic(kSharedSpace, Snap({5, 6, 7})));
  EXPECT_NE(store->GetNamed("sys"), nullptr);                                    // named hit
  EXPECT_EQ(store->GetNamed("nope"), nullptr);                                   // named miss
  EXPECT_TRUE(store->Lookup(kSharedSpace, Tokens{1, 2, 3, 4}, 1, true).named);   // named hit
  EXPECT_FALSE(store->Lookup(kSharedSpace, Tokens{5, 6, 7, 8}, 1, true).named);  // automatic hit
  EXPECT_FALSE(store->Lookup(kSharedSpace, Tokens{5, 6, 9}, 1, false).named);    // miss
  EXPECT_TRUE(store->Lookup(kSharedSpace, Tokens{9, 9}, 1, true).empty());       // miss
  const PrefixStoreStats stats = store->stats();
  EXPECT_EQ(stats.named_hits, 2);
  EXPECT_EQ(stats.named_misses, 1);
  EXPECT_EQ(stats.automatic_hits, 1);
  EXPECT_EQ(stats.automatic_misses, 2);
  EXPECT_EQ(store->Info("sys")->hits, 2);
}

TEST_F(PrefixStoreTest, AutomaticPutNoOps) {
  auto store = Make(200);
  ASSERT_TRUE(store->PutNamed("sys", Snap({1, 2, 3, 4})).ok());  // 64 bytes, pinned
  EXPECT_FALSE(store->PutAutomatic(kSharedSpace, nullptr));
  EXPECT_FALSE(store->PutAutomatic(kSharedSpace, Snap({1, 2, 3, 4})));  // equal tokens exist
  EXPECT_FALSE(store->PutAutomatic(kSharedSpace, Snap({1, 2})));        // a longer entry covers it
  EXPECT_TRUE(store->PutAutomatic(kSharedSpace, Snap({1, 2, 3, 4, 5})));  // 80 bytes: 144 used
  // 64 more bytes fit only by evicting the automatic [1 .. 5].
  EXPECT_TRUE(store->PutAutomatic(kSharedSpace, Snap({9, 9, 9, 9})));
  EXPECT_EQ(store->stats().evictions, 1);
  EXPECT_FALSE(Holds(*store, {1, 2, 3, 4, 5}));
  EXPECT_FALSE(store->PutAutomatic(kSharedSpace, Snap({9, 9})));  // covered by [9 9 9 9]
  // 144 bytes: 72 free + 64 evictable is not enough; nothing is evicted.
  EXPECT_FALSE(store->PutAutomatic(kSharedSpace, Snap(Tokens(9, 8))));
  const PrefixStoreStats stats = store->stats();
  EXPECT_EQ(stats.evictions, 1);
  EXPECT_EQ(stats.named_entries, 1);
  EXPECT_EQ(stats.automatic_entries, 1);
  EXPECT_EQ(stats.bytes_used, 128);
  EXPECT_TRUE(Holds(*store, {9, 9, 9, 9}));
}

// Whether an entry of exactly `tokens` is stored, without counting or touching anything.
bool Stored(PrefixStore& store, Tokens tokens) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  tokens.push_back(-1);
  return store.Peek(kSharedSpace, tokens, n, /*allow_partial=*/false).num_tokens == n;
}

TEST_F(PrefixStoreTest, PeekCountsNothingAndTouchesNothing) {
  auto store = Make(100);  // three 2-token entries fit
  ASSERT_TRUE(store->PutAutomatic(kSharedSpace, Snap({1, 1})));
  ASSERT_TRUE(store->PutAutomatic(kSharedSpace, Snap({2, 2})));
  ASSERT_TRUE(store->PutNamed("c", Snap({3, 3}), Named(false)).ok());
  clock_.Advance(absl::Seconds(5));

  PrefixMatch m = store->Peek(kSharedSpace, Tokens{1, 1, 9}, 1, false);
  EXPECT_EQ(m.num_tokens, 2);
  EXPECT_FALSE(m.named);
  EXPECT_NE(m.entry_id, 0u);
  EXPECT_THAT(m.snapshot->token_ids(), ElementsAre(1, 1));
  PrefixMatch n = store->Peek(kSharedSpace, Tokens{3, 3, 9}, 1, true);
  EXPECT_TRUE(n.named);
  EXPECT_EQ(n.name, "c");
  EXPECT_NE(n.entry_id, m.entry_id);
  EXPECT_TRUE(store->Peek(kSharedSpace, Tokens{9, 9}, 1, true).empty());
  EXPECT_TRUE(
      store->Peek(kSharedSpace, Tokens{1, 1}, 2, true).empty());  // the last token stays uncovered

  PrefixStoreStats stats = store->stats();
  EXPECT_EQ(stats.named_hits, 0);
  EXPECT_EQ(stats.automatic_hits, 0);
  EXPECT_EQ(stats.automatic_misses, 0);
  EXPECT_EQ(store->Info("c")->hits, 0);
  EXPECT_EQ(store->Info("c")->last_used_at, kStart);
  EXPECT_TRUE(store->Info("c")->referenced);  // `n` holds it
  m = {};
  n = {};
  // The LRU order is still the insertion order: [1 1] goes first.
  ASSERT_TRUE(store->PutAutomatic(kSharedSpace, Snap({4, 4})));
  EXPECT_FALSE(Stored(*store, {1, 1}));
  EXPECT_TRUE(Stored(*store, {2, 2}));
  EXPECT_EQ(store->stats().evictions, 1);
}

TEST_F(PrefixStoreTest, RecordUseCountsExactlyOneHitAndMakesTheEntryMostRecent) {
  auto store = Make(100);
  ASSERT_TRUE(store->PutAutomatic(kSharedSpace, Snap({1, 1})));
  ASSERT_TRUE(store->PutAutomatic(kSharedSpace, Snap({2, 2})));
  ASSERT_TRUE(store->PutNamed("c", Snap({3, 3}), Named(false)).ok());
  clock_.Advance(absl::Seconds(5));

  store->RecordUse(store->Peek(kSharedSpace, Tokens{1, 1, 9}, 1, false));
  PrefixStoreStats stats = store->stats();
  EXPECT_EQ(stats.automatic_hits, 1);
  EXPECT_EQ(stats.named_hits, 0);
  EXPECT_EQ(stats.automatic_misses, 0);

  store->RecordUse(store->Peek(kSharedSpace, Tokens{3, 3, 9}, 1, false));
  EXPECT_EQ(store->stats().named_hits, 1);
  EXPECT_EQ(store->Info("c")->hits, 1);
  EXPECT_EQ(store->Info("c")->last_used_at, kStart + absl::Seconds(5));

  store->RecordUse(PrefixMatch{});  // nothing matched: a miss
  EXPECT_EQ(store->stats().automatic_misses, 1);

  // A named snapshot a caller held (no entry id): found by name.
  clock_.Advance(absl::Seconds(1));
  store->RecordUse(
      {.snapshot = store->PeekNamed("c"), .num_tokens = 2, .named = true, .name = "c"});
  EXPECT_EQ(store->stats().named_hits, 2);
  EXPECT_EQ(store->Info("c")->hits, 2);
  EXPECT_EQ(store->Info("c")->last_used_at, kStart + absl::Seconds(6));

  // Used: [1 1] and c are recent; [2 2] is the least recently used and goes first.
  ASSERT_TRUE(store->PutAutomatic(kSharedSpace, Snap({4, 4})));
  EXPECT_FALSE(Stored(*store, {2, 2}));
  EXPECT_TRUE(Stored(*store, {1, 1}));
  EXPECT_TRUE(store->Info("c").has_value());
}

TEST_F(PrefixStoreTest, RecordUseOfAReplacedOrDroppedEntryCountsNothing) {
  auto store = Make(1000);
  ASSERT_TRUE(store->PutNamed("n", Snap({1, 2, 3})).ok());
  PrefixMatch replaced = store->Peek(kSharedSpace, Tokens{1, 2, 3, 4}, 1, false);
  ASSERT_EQ(replaced.name, "n");
  ASSERT_TRUE(store->PutNamed("n", Snap({1, 2, 5})).ok());
  store->RecordUse(replaced);

  ASSERT_TRUE(store->PutNamed("d", Snap({7, 7})).ok());
  PrefixMatch deleted = store->Peek(kSharedSpace, Tokens{7, 7, 7}, 1, false);
  ASSERT_TRUE(store->DeleteNamed("d"));
  store->RecordUse(deleted);

  ASSERT_TRUE(store->PutNamed("t", Snap({8, 8}), Named(true, absl::Seconds(1))).ok());
  PrefixMatch expired = store->Peek(kSharedSpace, Tokens{8, 8, 8}, 1, false);
  ASSERT_EQ(expired.name, "t");
  clock_.Advance(absl::Seconds(1));
  store->RecordUse(expired);

  const PrefixStoreStats stats = store->stats();
  EXPECT_EQ(stats.named_hits, 0);
  EXPECT_EQ(stats.automatic_hits, 0);
  EXPECT_EQ(stats.automatic_misses, 0);
  EXPECT_EQ(store->Info("n")->hits, 0);
}

TEST_F(PrefixStoreTest, ReclaimFreesUnusedEntriesLeastRecentlyUsedFirst) {
  auto store = Make(1000);
  ASSERT_TRUE(store->PutAutomatic(kSharedSpace, Snap({1, 1})));        // 32 bytes
  ASSERT_TRUE(store->PutAutomatic(kSharedSpace, Snap({2, 2, 2})));     // 48
  ASSERT_TRUE(store->PutNamed("p", Snap({3, 3})).ok());                // 32, pinned
  ASSERT_TRUE(store->PutNamed("u", Snap({4, 4}), Named(false)).ok());  // 32
  std::shared_ptr<const Snapshot> held = Snap({5, 5});
  ASSERT_TRUE(store->PutAutomatic(kSharedSpace, held));  // 32, in use
  store->RecordUse(
      store->Peek(kSharedSpace, Tokens{1, 1, 9}, 1, false));  // [1 1] becomes the most recent
  // Least recently used first: [2 2 2], p, u, [5 5], [1 1]; p is pinned, [5 5] held.
  EXPECT_EQ(store->ReclaimableBytes(), 48 + 32 + 32);
  EXPECT_EQ(store->stats().bytes_used, 176);

  EXPECT_EQ(store->Reclaim(0), 0);
  EXPECT_EQ(store->stats().bytes_used, 176);
  EXPECT_EQ(store->Reclaim(1), 48);  // [2 2 2] alone is enough
  EXPECT_FALSE(Stored(*store, {2, 2, 2}));
  EXPECT_TRUE(store->Info("u").has_value());
  EXPECT_EQ(store->Reclaim(40), 64);  // u (32), then [1 1]
  EXPECT_FALSE(store->Info("u").has_value());
  EXPECT_FALSE(Stored(*store, {1, 1}));
  EXPECT_THAT(DroppedNames(*store), ElementsAre("u"));
  EXPECT_EQ(store->ReclaimableBytes(), 0);
  EXPECT_EQ(store->Reclaim(1000), 0);  // nothing left that may go
  EXPECT_TRUE(store->Info("p").has_value());
  EXPECT_TRUE(Stored(*store, {5, 5}));
  PrefixStoreStats stats = store->stats();
  EXPECT_EQ(stats.evictions, 3);
  EXPECT_EQ(stats.bytes_used, 64);

  held.reset();
  EXPECT_EQ(store->ReclaimableBytes(), 32);
  EXPECT_EQ(store->Reclaim(1000), 32);
  EXPECT_EQ(store->stats().bytes_used, 32);  // p
}

TEST_F(PrefixStoreTest, ReclaimableBytesOfASnapshotUnderSeveralNames) {
  auto store = Make(1000);
  std::shared_ptr<const Snapshot> s = Snap({1, 2, 3});  // 48 bytes
  ASSERT_TRUE(store->PutNamed("a", s, Named(false)).ok());
  ASSERT_TRUE(store->PutNamed("b", s, Named(false)).ok());
  std::shared_ptr<const Snapshot> t = Snap({4, 4});  // 32 bytes, also pinned under another name
  ASSERT_TRUE(store->PutNamed("pinned", t).ok());
  ASSERT_TRUE(store->PutNamed("loose", t, Named(false)).ok());
  EXPECT_EQ(store->ReclaimableBytes(), 0);  // both held by the test
  s.reset();
  t.reset();
  // Both names of [1 2 3] may go, so its bytes can be freed; [4 4] stays with "pinned".
  EXPECT_EQ(store->ReclaimableBytes(), 48);
  EXPECT_EQ(store->Reclaim(48), 48);
  EXPECT_FALSE(store->Info("a").has_value());
  EXPECT_FALSE(store->Info("b").has_value());
  EXPECT_EQ(store->stats().bytes_used, 32);
}

TEST_F(PrefixStoreTest, DroppedNamesAreReportedForEvictionsAndExpirationsOnly) {
  auto store = Make(200);
  ASSERT_TRUE(store->PutNamed("e", Snap({1, 1}), Named(false)).ok());
  ASSERT_TRUE(store->PutNamed("d", Snap({2, 2})).ok());
  ASSERT_TRUE(store->PutNamed("t", Snap({3, 3}), Named(true, absl::Seconds(5))).ok());
  ASSERT_TRUE(store->PutNamed("r", Snap({4, 4})).ok());

  // Deleting and replacing are the caller's own doing: not dropped.
  ASSERT_TRUE(store->DeleteNamed("d"));
  ASSERT_TRUE(store->PutNamed("r", Snap({4, 5})).ok());
  EXPECT_THAT(DroppedNames(*store), IsEmpty());

  clock_.Advance(absl::Seconds(5));
  EXPECT_THAT(DroppedNames(*store), IsEmpty());  // noticed by the next call
  EXPECT_EQ(store->stats().expirations, 1);
  EXPECT_THAT(DroppedNames(*store), ElementsAre("t"));

  // 144 bytes: 136 free; the unpinned "e" is evicted for room.
  ASSERT_TRUE(store->PutAutomatic(kSharedSpace, Snap(Tokens(9, 7))));
  EXPECT_THAT(DroppedNames(*store), ElementsAre("e"));
  EXPECT_EQ(store->stats().evictions, 1);
  EXPECT_TRUE(store->Info("r").has_value());
}

// An encoder-decoder model's named prefix: its events name its encoder input, and the same
// name put again with the same decoder tokens but another encoder input replaces it.
TEST_F(PrefixStoreTest, AnEncoderDecoderPrefixIsItsEncoderInput) {
  auto store = Make(200);
  (void)store->events().Drain();
  auto with_encoder = [](const Tokens& encoder_ids) {
    auto cache = *KvCache::CreateDynamic({LayerSpec{}});
    const at::Tensor k = at::ones({1, 1, 2, 2});
    EXPECT_TRUE(cache->Update(0, k, -k).ok());
    auto state = std::make_shared<CrossAttentionState>();
    state->encoder_ids = encoder_ids;
    cache->set_cross_attention(state);
    return *Snapshot::Capture(*cache, {257, 256}, kModel);
  };
  ASSERT_TRUE(store->PutNamed("ten/doc", with_encoder({5, 6, 7})).ok());
  ASSERT_TRUE(store->PutNamed("ten/doc", with_encoder({5, 6, 7})).ok());  // idempotent
  ASSERT_TRUE(store->PutNamed("ten/doc", with_encoder({8, 9})).ok());     // replaces
  std::vector<PrefixEvent> events = store->events().Drain();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].kind, PrefixEventKind::kStored);
  EXPECT_THAT(events[0].tokens, ElementsAre(5, 6, 7));
  EXPECT_EQ(events[1].cause, RemovalCause::kReplaced);
  EXPECT_THAT(events[2].tokens, ElementsAre(8, 9));
  EXPECT_THAT(store->GetNamed("ten/doc")->cross_attention()->encoder_ids, ElementsAre(8, 9));
}

// Every change, named or automatic, is logged in order with its cause, the tokens it covers
// and (for a named put) what the journal needs; a new store's log starts with "cleared".
TEST_F(PrefixStoreTest, TheEventLogRecordsEveryChangeInOrder) {
  auto store = Make(200);
  std::vector<PrefixEvent> events = store->events().Drain();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, PrefixEventKind::kCleared);
  EXPECT_EQ(events[0].sequence, 1u);
  const uint64_t epoch = events[0].epoch;
  EXPECT_EQ(epoch, static_cast<uint64_t>(absl::ToUnixMillis(kStart)));

  ASSERT_TRUE(store->PutNamed("ten/a", Snap({1, 2}), Named(false, absl::Seconds(9))).ok());
  ASSERT_TRUE(store->PutAutomatic("ten", Snap({1, 2, 3, 4})));
  ASSERT_TRUE(store->PutNamed("ten/a", Snap({1, 5}), Named(false, absl::Seconds(9))).ok());
  ASSERT_TRUE(store->DeleteNamed("ten/a"));
  // 12 tokens (192 bytes) need the automatic entry's room.
  ASSERT_TRUE(store->PutAutomatic(kSharedSpace, Snap(Tokens(12, 7))));
  events = store->events().Drain();
  std::vector<std::string> got;
  for (const PrefixEvent& e : events) {
    EXPECT_EQ(e.epoch, epoch);
    got.push_back(absl::StrCat(std::string(PrefixEventKindName(e.kind)), ":",
                               std::string(RemovalCauseName(e.cause)), ":",
                               e.named ? "named" : "auto", ":", e.space, ":", e.name, ":",
                               e.tokens.size(), ":", e.sequence));
  }
  EXPECT_THAT(got,
              ElementsAre("stored:none:named:ten:ten/a:2:2", "stored:none:auto:ten::4:3",
                          "removed:replaced:named:ten:ten/a:2:4", "stored:none:named:ten:ten/a:2:5",
                          "removed:deleted:named:ten:ten/a:2:6", "removed:evicted:auto:ten::4:7",
                          "stored:none:auto:::12:8"));
  EXPECT_EQ(events[0].options.ttl, absl::Seconds(9));
  EXPECT_EQ(events[0].created_at, kStart);
  EXPECT_THAT(events[3].tokens, ElementsAre(1, 5));
  EXPECT_TRUE(store->events().Drain().empty());
  // A flush starts a new epoch.
  store->events().Clear();
  events = store->events().Drain();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, PrefixEventKind::kCleared);
  EXPECT_EQ(events[0].epoch, epoch + 1);
}

// A deletion's undo puts the entry back as it was: its TTL still counts from its creation.
TEST_F(PrefixStoreTest, RestoreNamedPutsBackWhatWasDeleted) {
  auto store = Make(1000);
  std::shared_ptr<const Snapshot> s = Snap({1, 2, 3});
  ASSERT_TRUE(store->PutNamed("n", s, Named(true, absl::Seconds(10))).ok());
  ASSERT_NE(store->GetNamed("n"), nullptr);
  const PrefixInfo before = *store->Info("n");
  clock_.Advance(absl::Seconds(4));
  ASSERT_TRUE(store->DeleteNamed("n"));
  EXPECT_TRUE(store->RestoreNamed(before, s));
  const std::optional<PrefixInfo> after = store->Info("n");
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(after->created_at, kStart);
  EXPECT_EQ(after->hits, 1);
  EXPECT_FALSE(store->RestoreNamed(before, s));  // the name is taken
  clock_.Advance(absl::Seconds(6));
  EXPECT_FALSE(store->Info("n").has_value());    // expired on its original schedule
  EXPECT_FALSE(store->RestoreNamed(before, s));  // and cannot come back past it
}

TEST_F(PrefixStoreTest, ConcurrentReadersAndWriters) {
  auto store = Make(1 << 20);
  ASSERT_TRUE(store->PutNamed("sys", Snap({1, 2, 3})).ok());
  constexpr int kThreads = 4;
  constexpr int kCalls = 200;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&store, t] {
      for (int i = 0; i < kCalls; ++i) {
        EXPECT_NE(store->GetNamed("sys"), nullptr);
        EXPECT_EQ(store->List().size(), 1u);
        store->PutAutomatic(kSharedSpace, Snap({100 + t, i, 0}));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const PrefixStoreStats stats = store->stats();
  EXPECT_EQ(stats.named_hits, kThreads * kCalls);
  EXPECT_EQ(stats.automatic_entries, kThreads * kCalls);
  EXPECT_EQ(stats.bytes_used, (1 + kThreads * kCalls) * 3 * kBytesPerToken);
}

TEST(QualifiedPrefixNameTest, RoundTrips) {
  EXPECT_EQ(QualifiedPrefixName("alice", "sys"), "alice/sys");
  EXPECT_EQ(QualifiedPrefixName(kSharedSpace, "sys"), "sys");
  EXPECT_EQ(SplitQualifiedPrefixName("alice/sys"),
            std::make_pair(std::string_view("alice"), std::string_view("sys")));
  EXPECT_EQ(SplitQualifiedPrefixName("sys"),
            std::make_pair(std::string_view(kSharedSpace), std::string_view("sys")));
}

// Automatic entries are found only by their own namespace; shared entries by every one.
TEST_F(PrefixStoreTest, LookupNeverCrossesNamespaces) {
  auto store = Make(1 << 20);
  ASSERT_TRUE(store->PutAutomatic("alice", Snap({1, 2, 3, 4})));
  EXPECT_EQ(store->Lookup("alice", Tokens{1, 2, 3, 4, 5}, 1, true).num_tokens, 4);
  EXPECT_TRUE(store->Peek("bob", Tokens{1, 2, 3, 4, 5}, 1, true).empty());
  EXPECT_TRUE(store->Peek(kSharedSpace, Tokens{1, 2, 3, 4, 5}, 1, true).empty());
  // Bob's identical prompt is kept for bob (alice's entry does not cover it for him).
  EXPECT_TRUE(store->PutAutomatic("bob", Snap({1, 2, 3, 4})));
  EXPECT_EQ(store->stats().automatic_entries, 2);
  // A shared named entry serves both; each tenant's own longer entry wins over it.
  ASSERT_TRUE(store->PutNamed("sys", Snap({1, 2})).ok());
  ASSERT_TRUE(store->PutNamed("carol/sys", Snap({1, 2, 3})).ok());
  PrefixMatch carol = store->Peek("carol", Tokens{1, 2, 3, 4, 5}, 1, true);
  EXPECT_EQ(carol.name, "carol/sys");
  EXPECT_EQ(carol.num_tokens, 3);
  PrefixMatch dave = store->Peek("dave", Tokens{1, 2, 3, 4, 5}, 1, true);
  EXPECT_EQ(dave.name, "sys");
  EXPECT_EQ(dave.num_tokens, 2);
  PrefixMatch alice = store->Peek("alice", Tokens{1, 2, 3, 4, 5}, 1, true);
  EXPECT_FALSE(alice.named);
  EXPECT_EQ(alice.num_tokens, 4);
  // A shared entry covering a prompt makes an automatic copy pointless.
  EXPECT_FALSE(store->PutAutomatic("dave", Snap({1, 2})));
  EXPECT_TRUE(store->PeekNamed("carol/sys") != nullptr);
  EXPECT_TRUE(store->PeekNamed("dave/sys") == nullptr);
}

// A namespace's byte limit evicts its own entries first and refuses a named put that cannot
// fit, naming the limit; other namespaces and the shared one are untouched.
TEST_F(PrefixStoreTest, NamespaceLimitEvictsItsOwnEntriesThenRefuses) {
  PrefixStoreOptions options = StoreOptions(1 << 20);
  options.space_budget_bytes = 6 * kBytesPerToken;
  options.space_budget_name = "--tenant-max-prefix-bytes";
  auto made = PrefixStore::Create(std::move(options), &clock_);
  ASSERT_TRUE(made.ok());
  PrefixStore& store = **made;
  ASSERT_TRUE(store.PutAutomatic("bob", Snap({7, 7, 7, 7, 7})));
  ASSERT_TRUE(store.PutAutomatic("alice", Snap({1, 1, 1, 1})));
  EXPECT_EQ(store.space_bytes("alice"), 4 * kBytesPerToken);
  // 4 + 4 > 6: alice's older automatic entry goes, bob's stays.
  ASSERT_TRUE(store.PutAutomatic("alice", Snap({2, 2, 2, 2})));
  EXPECT_TRUE(store.Peek("alice", Tokens{1, 1, 1, 1, 9}, 1, false).empty());
  EXPECT_EQ(store.Peek("alice", Tokens{2, 2, 2, 2, 9}, 1, false).num_tokens, 4);
  EXPECT_EQ(store.space_bytes("alice"), 4 * kBytesPerToken);
  EXPECT_EQ(store.space_bytes("bob"), 5 * kBytesPerToken);
  // Pinned entries are never evicted: a second pinned 4-token entry cannot fit.
  ASSERT_TRUE(store.PutNamed("alice/a", Snap({3, 3, 3, 3})).ok());
  absl::StatusOr<PrefixInfo> refused = store.PutNamed("alice/b", Snap({4, 4, 4, 4}));
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.status().message()),
              AllOf(HasSubstr("--tenant-max-prefix-bytes"), HasSubstr("named prefix 'b'")));
  EXPECT_EQ(store.stats().space_refusals, 1);
  // The shared namespace and other tenants are not limited by it.
  EXPECT_TRUE(store.PutNamed("big", Snap({5, 5, 5, 5, 5, 5, 5, 5})).ok());
  EXPECT_TRUE(store.PutNamed("bob/b", Snap({6, 6, 6, 6, 6, 6})).ok());
  // Alice's limit frees once her entry goes.
  ASSERT_TRUE(store.DeleteNamed("alice/a"));
  EXPECT_TRUE(store.PutNamed("alice/b", Snap({4, 4, 4, 4})).ok());
}

}  // namespace prefix_store_test
}  // namespace kvserve::cache
