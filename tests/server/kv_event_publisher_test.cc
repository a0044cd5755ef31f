// KvEventPublisher: entries to 16-token blocks with chained hashes, shared blocks counted,
// views, replay and resync.
#include "server/kv_event_publisher.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <vector>

namespace kvserve::server {
namespace {

using cache::PrefixEvent;
using cache::PrefixEventKind;

std::vector<int32_t> Iota(int n, int32_t first = 0) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

class Log {
 public:
  PrefixEvent Cleared() {
    PrefixEvent e;
    e.sequence = next_++;
    e.kind = PrefixEventKind::kCleared;
    return e;
  }
  PrefixEvent Stored(uint64_t entry, std::vector<int32_t> tokens, std::string space = "") {
    PrefixEvent e;
    e.sequence = next_++;
    e.kind = PrefixEventKind::kStored;
    e.entry_id = entry;
    e.space = std::move(space);
    e.tokens = std::move(tokens);
    return e;
  }
  PrefixEvent Removed(uint64_t entry, std::vector<int32_t> tokens, std::string space = "") {
    PrefixEvent e = Stored(entry, std::move(tokens), std::move(space));
    e.kind = PrefixEventKind::kRemoved;
    return e;
  }

 private:
  uint64_t next_ = 1;
};

std::unique_ptr<KvEventPublisher> Make(int64_t buffer = 100) {
  auto p = KvEventPublisher::Create({.buffer_batches = buffer});
  EXPECT_TRUE(p.ok()) << p.status();
  return std::move(*p);
}

// The blocks a subscriber holds after applying `batch` to `held`.
void Apply(const KvEventBatch& batch, std::set<int64_t>* held) {
  for (const KvBlockEvent& e : batch.events) {
    switch (e.kind) {
      case KvBlockEvent::Kind::kCleared:
        held->clear();
        break;
      case KvBlockEvent::Kind::kStored:
        if (e.parent_hash) {
          EXPECT_TRUE(held->count(*e.parent_hash)) << "parent unknown";
        }
        for (const KvBlock& b : e.blocks) held->insert(b.hash);
        break;
      case KvBlockEvent::Kind::kRemoved:
        for (int64_t h : e.removed) EXPECT_EQ(held->erase(h), 1u);
        break;
    }
  }
}

TEST(KvEventPublisherTest, HashChainIsFnv1aOverParentAndTokens) {
  // FNV-1a 64 of nothing is the offset basis; of "a" a known value.
  EXPECT_EQ(static_cast<uint64_t>(KvNamespaceSeed("")), 0xcbf29ce484222325ULL);
  EXPECT_EQ(static_cast<uint64_t>(KvNamespaceSeed("a")), 0xaf63dc4c8601ec8cULL);
  const std::vector<int32_t> block = Iota(16);
  EXPECT_NE(KvBlockHash(1, block), KvBlockHash(2, block));
  EXPECT_EQ(KvBlockHash(7, block), KvBlockHash(7, block));
}

TEST(KvEventPublisherTest, EntriesBecomeWholeBlocksChainedToTheirParents) {
  auto p = Make();
  Log log;
  p->Consume({log.Cleared(), log.Stored(1, Iota(40))});  // 2 whole blocks, 8 tokens left over
  ASSERT_EQ(p->last_sequence(), 2u);
  KvEventRead r = p->Read(2, KvEventView::kAll);
  ASSERT_EQ(r.kind, KvEventRead::Kind::kBatch);
  ASSERT_EQ(r.batch.events.size(), 1u);
  const KvBlockEvent stored = r.batch.events[0];  // a copy: `r` is read again below
  EXPECT_EQ(stored.kind, KvBlockEvent::Kind::kStored);
  EXPECT_FALSE(stored.parent_hash.has_value());
  ASSERT_EQ(stored.blocks.size(), 2u);
  const int64_t first = KvBlockHash(KvNamespaceSeed(""), Iota(16));
  EXPECT_EQ(stored.blocks[0].hash, first);
  EXPECT_EQ(stored.blocks[0].tokens, Iota(16));
  EXPECT_EQ(stored.blocks[1].hash, KvBlockHash(first, Iota(16, 16)));

  // An entry extending the first shares its blocks: only the new ones, with their parent.
  p->Consume({log.Stored(2, Iota(64))});
  r = p->Read(3, KvEventView::kAll);
  ASSERT_EQ(r.batch.events.size(), 1u);
  EXPECT_EQ(r.batch.events[0].parent_hash, stored.blocks[1].hash);
  EXPECT_EQ(r.batch.events[0].blocks.size(), 2u);
  EXPECT_EQ(p->num_blocks(), 4);

  // Removing the shorter entry frees nothing (the longer holds its blocks); the longer frees
  // all four, children first.
  p->Consume({log.Removed(1, Iota(40)), log.Removed(2, Iota(64))});
  EXPECT_TRUE(p->Read(4, KvEventView::kAll).batch.events.empty());
  r = p->Read(5, KvEventView::kAll);
  ASSERT_EQ(r.batch.events.size(), 1u);
  ASSERT_EQ(r.batch.events[0].removed.size(), 4u);
  EXPECT_EQ(r.batch.events[0].removed.back(), first);
  EXPECT_EQ(p->num_blocks(), 0);
  EXPECT_EQ(p->Read(6, KvEventView::kAll).kind, KvEventRead::Kind::kNone);
}

TEST(KvEventPublisherTest, TenantBlocksAreSeededByNamespaceAndSeenByAdminsOnly) {
  auto p = Make();
  Log log;
  p->Consume({log.Cleared(), log.Stored(1, Iota(32), "acme"), log.Stored(2, Iota(32))});
  EXPECT_EQ(p->num_blocks(), 4);  // the same tokens in two namespaces: two chains
  EXPECT_EQ(p->Read(2, KvEventView::kAll).batch.events.size(), 1u);
  EXPECT_TRUE(p->Read(2, KvEventView::kShared).batch.events.empty());
  EXPECT_EQ(p->Read(2, KvEventView::kAll).batch.events[0].blocks[0].hash,
            KvBlockHash(KvNamespaceSeed("acme"), Iota(16)));
  EXPECT_EQ(p->Snapshot(KvEventView::kShared).events.size(), 1u + 2u);
  EXPECT_EQ(p->Snapshot(KvEventView::kAll).events.size(), 1u + 4u);
}

TEST(KvEventPublisherTest, ReplayAndResyncFromTheSnapshot) {
  auto p = Make(/*buffer=*/3);
  Log log;
  p->Consume({log.Cleared(), log.Stored(1, Iota(16)), log.Stored(2, Iota(32, 100)),
              log.Stored(3, Iota(16, 200)), log.Removed(1, Iota(16))});
  EXPECT_EQ(p->oldest_sequence(), 3u);
  EXPECT_EQ(p->Read(3, KvEventView::kAll).kind, KvEventRead::Kind::kBatch);
  // Number 2 fell out of the buffer: the whole state instead, and what was missed.
  KvEventRead r = p->Read(2, KvEventView::kAll);
  ASSERT_EQ(r.kind, KvEventRead::Kind::kResync);
  EXPECT_EQ(r.first_missing, 2u);
  EXPECT_EQ(r.last_missing, 2u);
  EXPECT_EQ(r.batch.sequence, 5u);
  std::set<int64_t> held = {12345};
  Apply(r.batch, &held);
  EXPECT_EQ(held.size(), 3u);  // entries 2 (two blocks) and 3
  // A subscriber ahead of the publisher (an earlier process's numbers) is resynced too.
  r = p->Read(40, KvEventView::kAll);
  EXPECT_EQ(r.kind, KvEventRead::Kind::kResync);
  EXPECT_GT(r.first_missing, r.last_missing);

  // Replaying from the buffer gives the same blocks as the snapshot.
  std::set<int64_t> replayed;
  Apply(p->Snapshot(KvEventView::kAll), &replayed);
  EXPECT_EQ(replayed, held);
}

TEST(KvEventPublisherTest, NumbersStartAtTheBaseSoAnEarlierProcessIsResynced) {
  auto made = KvEventPublisher::Create({.buffer_batches = 10, .sequence_base = 5000});
  ASSERT_TRUE(made.ok());
  KvEventPublisher& p = **made;
  EXPECT_EQ(p.last_sequence(), 5000u);
  EXPECT_EQ(p.Snapshot(KvEventView::kAll).sequence, 5000u);
  Log log;
  p.Consume({log.Cleared(), log.Stored(1, Iota(16))});
  EXPECT_EQ(p.last_sequence(), 5002u);
  EXPECT_EQ(p.Read(5001, KvEventView::kAll).batch.events[0].kind, KvBlockEvent::Kind::kCleared);
  // The last number an earlier process gave (below the base): the whole state, "cleared" first.
  const KvEventRead r = p.Read(41, KvEventView::kAll);
  ASSERT_EQ(r.kind, KvEventRead::Kind::kResync);
  EXPECT_EQ(r.first_missing, 41u);
  EXPECT_EQ(r.last_missing, 5000u);
  EXPECT_EQ(r.batch.events[0].kind, KvBlockEvent::Kind::kCleared);
}

TEST(KvEventPublisherTest, ListenersHearNewBatches) {
  struct Counter : KvEventPublisher::Listener {
    void OnKvEvents() override { ++calls; }
    int calls = 0;
  };
  auto p = Make();
  auto counter = std::make_shared<Counter>();
  p->AddListener(counter);
  Log log;
  p->Consume({log.Cleared()});
  EXPECT_EQ(counter->calls, 1);
  counter.reset();  // gone: dropped, not called
  p->Consume({log.Stored(1, Iota(16))});
  auto closing = std::make_shared<Counter>();
  p->AddListener(closing);
  EXPECT_EQ(p->Read(2, KvEventView::kAll).kind, KvEventRead::Kind::kBatch);
  p->Close();
  EXPECT_EQ(closing->calls, 1);
  EXPECT_EQ(p->Read(2, KvEventView::kAll).kind, KvEventRead::Kind::kBatch);  // still readable
  EXPECT_EQ(p->Read(3, KvEventView::kAll).kind, KvEventRead::Kind::kClosed);
  EXPECT_FALSE(KvEventPublisher::Create({.buffer_batches = 0}).ok());
}

}  // namespace
}  // namespace kvserve::server
