// KvEventPublisher: the prefix store's entries, named and automatic, as the KV-cache events that
// cache-aware routers consume (vLLM's BlockStored / BlockRemoved / AllBlocksCleared): fixed
// blocks of 16 tokens with chained hashes, one batch per prefix-event-log number, kept in a
// bounded replay buffer for subscribers that reconnect. No wire types: adapters convert.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "server/prefix_event_consumer.h"

namespace kvserve::server {

// Tokens per block. Only whole blocks are published: an entry's last tokens past its last
// multiple of 16 are in no block.
inline constexpr int kKvBlockSize = 16;

// The hash chain (the same in every kvserve, so a router can compute it from token ids):
// FNV-1a 64 over bytes. A namespace's seed is the FNV-1a of its name's bytes (the shared
// namespace, "", gives FNV's offset basis); a block's hash is the FNV-1a of its parent's hash
// (the seed for a first block) as 8 little-endian bytes followed by its tokens as 4
// little-endian bytes each, read as a two's-complement int64.
int64_t KvNamespaceSeed(std::string_view space);
int64_t KvBlockHash(int64_t parent_or_seed, absl::Span<const int32_t> block_tokens);

struct KvBlock {
  int64_t hash = 0;
  std::vector<int32_t> tokens;  // kKvBlockSize of them
};

struct KvBlockEvent {
  enum class Kind { kStored, kRemoved, kCleared };
  Kind kind = Kind::kStored;
  uint64_t event_id = 0;  // 1, 2, 3, ... over the publisher's life (views skip some)
  std::string space;      // the namespace of the blocks (empty for kCleared)
  // kStored: a chain, each block the child of the one before it.
  std::vector<KvBlock> blocks;
  // kStored: the block the first one extends; nullopt when the first block starts an entry.
  std::optional<int64_t> parent_hash;
  // kRemoved: the blocks no entry holds any more.
  std::vector<int64_t> removed;
};

struct KvEventBatch {
  uint64_t sequence = 0;             // the prefix event log's number of the change
  absl::Time time;                   // when the publisher heard it
  std::vector<KvBlockEvent> events;  // may be empty (a change of no whole block, or not visible)
};

// Who sees which blocks: admins every namespace's, other callers the shared namespace's only
// (a tenant's tokens are its own).
enum class KvEventView { kAll, kShared };

struct KvEventPublisherOptions {
  // Batches kept for replay (>= 1); a subscriber that asks for an older one is resynced.
  int64_t buffer_batches = 4096;
  // Added to the prefix event log's numbers: the server gives its start time in milliseconds
  // since the Unix epoch times 1000, so that a restarted server's numbers are larger than any
  // its predecessor gave (unless that one made 1,000 changes per millisecond of its life) and
  // a subscriber that reconnects with an earlier process's number is resynced, not misled.
  uint64_t sequence_base = 0;
};

// What a subscriber reading from number `next` gets.
struct KvEventRead {
  enum class Kind {
    kBatch,   // `batch` is number `next`
    kNone,    // nothing past next - 1 yet
    kResync,  // `next` is no longer (or not yet) held: `batch` is the whole state instead
    kClosed,  // nothing past next - 1, and nothing will come (Close)
  };
  Kind kind = Kind::kNone;
  KvEventBatch batch;
  // kResync: the numbers that cannot be replayed, [first_missing, last_missing]; for a
  // subscriber ahead of the publisher (of an earlier process) first_missing > last_missing.
  uint64_t first_missing = 0;
  uint64_t last_missing = 0;
};

// Thread-safe: Consume runs on the engine thread, the rest on any.
class KvEventPublisher final : public PrefixEventConsumer {
 public:
  // Told (from the engine thread, outside the publisher's lock) that batches were added; must
  // not block.
  class Listener {
   public:
    virtual ~Listener() = default;
    virtual void OnKvEvents() = 0;
  };

  // InvalidArgument naming the option when it is out of range.
  static absl::StatusOr<std::unique_ptr<KvEventPublisher>> Create(KvEventPublisherOptions options);

  void Consume(absl::Span<const cache::PrefixEvent> events) override;

  // The batch numbered `next` (seen through `view`), nothing yet, or a resync (see
  // KvEventRead).
  KvEventRead Read(uint64_t next, KvEventView view) const;
  // The whole state seen through `view` as one batch numbered last_sequence(): a kCleared
  // event, then every block held, parents before children.
  KvEventBatch Snapshot(KvEventView view) const;

  // Listeners are held weakly: one that is gone is dropped.
  void AddListener(std::weak_ptr<Listener> listener);
  // No batch will come any more (the server shuts down): readers that have read everything get
  // kClosed, and every listener is told.
  void Close();

  uint64_t sequence_base() const { return options_.sequence_base; }
  uint64_t last_sequence() const;    // sequence_base before any batch
  uint64_t oldest_sequence() const;  // of the buffer; 0 when empty
  int64_t num_blocks() const;        // blocks held, all namespaces

 private:
  struct BlockState {
    int refs = 0;  // entries holding it
    std::optional<int64_t> parent;
    std::vector<int32_t> tokens;
    std::string space;
    int depth = 0;  // its index in its chain
  };
  explicit KvEventPublisher(KvEventPublisherOptions options)
      : options_(options), last_sequence_(options.sequence_base) {}

  // The batch of one log event. Under mu_.
  KvEventBatch Apply(const cache::PrefixEvent& event, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  KvEventBatch SnapshotLocked(KvEventView view) const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const KvEventPublisherOptions options_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<int64_t, BlockState> blocks_ ABSL_GUARDED_BY(mu_);
  // The block hashes of each entry (by the store's entry id), first block first.
  absl::flat_hash_map<uint64_t, std::vector<int64_t>> entries_ ABSL_GUARDED_BY(mu_);
  std::deque<KvEventBatch> buffer_ ABSL_GUARDED_BY(mu_);
  uint64_t last_sequence_ ABSL_GUARDED_BY(mu_);
  uint64_t next_event_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::vector<std::weak_ptr<Listener>> listeners_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;

  // The listeners still there (the gone ones dropped), to tell outside the lock.
  std::vector<std::shared_ptr<Listener>> LiveListenersLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
};

}  // namespace kvserve::server
