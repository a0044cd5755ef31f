// PrefixStore: named and automatic prefix snapshots under a byte budget, with prefix lookup.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "base/clock.h"
#include "cache/prefix_events.h"
#include "cache/prefix_info.h"
#include "cache/token_radix_tree.h"

namespace kvserve::cache {

class Snapshot;

// An automatic entry as AutomaticEntries lists it, or an entry the store evicted.
struct AutomaticEntry {
  std::string space;
  std::shared_ptr<const Snapshot> snapshot;
  int64_t hits = 0;
  RetentionClass retention = RetentionClass::kNormal;
  // An evicted named entry's description (its qualified name, options, creation time, hits):
  // a lower tier keeps it as that named prefix. Unset for automatic entries.
  std::optional<PrefixInfo> named;
};

struct PrefixStoreOptions {
  // Most bytes of snapshot K/V the store keeps (Snapshot::bytes(), a snapshot held by several
  // entries counted once); > 0. Snapshots that readers still hold after the store dropped
  // them are not counted.
  int64_t budget_bytes = 0;
  // Fingerprint of the serving model; only snapshots with exactly this fingerprint are
  // stored. Non-empty.
  std::string model_fingerprint;
  // Most bytes of snapshots one tenant's namespace may hold (its named and automatic entries;
  // a snapshot held by several of its entries counted once); 0: no limit. The shared
  // namespace is not limited. A put beyond it first evicts the namespace's own evictable
  // entries; a named put that still cannot fit is ResourceExhausted naming
  // `space_budget_name` (the server's flag).
  int64_t space_budget_bytes = 0;
  std::string space_budget_name = "space_budget_bytes";
  // Eviction order: the lowest retention priority (retention.h) leaves first, ties least
  // recently used first. > 0.
  absl::Duration retention_half_life = absl::Minutes(10);
  // Called with each entry evicted to make room (RemovalCause::kEvicted: automatic entries and
  // unpinned named ones, with their retention class), after the store's lock is released, on
  // the thread that caused the eviction: where a snapshot tier takes it (see
  // SnapshotTiers::Demote). Null: evicted entries are dropped.
  std::function<void(AutomaticEntry entry)> on_evicted;
};

// One entry of the store as ListEntries tells it.
struct StoredEntry {
  uint64_t entry_id = 0;
  std::string space;  // its namespace
  bool named = false;
  std::string name;  // qualified; empty for automatic entries
  std::vector<int32_t> tokens;
};

// Every entry, and the last event the log had when they were listed: a consumer that has
// applied the log up to `sequence` knows exactly these entries.
struct StoreListing {
  uint64_t sequence = 0;
  std::vector<StoredEntry> entries;  // by entry id
};

// The result of Lookup: empty (no snapshot) when nothing usable matched.
struct PrefixMatch {
  std::shared_ptr<const Snapshot> snapshot;
  // Tokens to load: snapshot->LoadInto(cache, num_tokens); <= snapshot->num_tokens().
  int64_t num_tokens = 0;
  bool named = false;
  std::string name;       // of the named entry used; empty for automatic entries
  uint64_t entry_id = 0;  // the store's entry (0: not from the store)

  bool empty() const { return snapshot == nullptr; }
};

struct PrefixStoreStats {
  int64_t named_entries = 0;
  int64_t automatic_entries = 0;
  int64_t bytes_used = 0;
  int64_t budget_bytes = 0;
  int64_t named_hits = 0;        // GetNamed found the name; Lookup used a named entry
  int64_t named_misses = 0;      // GetNamed of an absent or expired name
  int64_t automatic_hits = 0;    // Lookup used an automatic entry
  int64_t automatic_misses = 0;  // Lookup found nothing usable
  int64_t evictions = 0;         // entries dropped to make room
  int64_t expirations = 0;       // entries dropped by TTL
  int64_t space_refusals = 0;    // puts refused or skipped at a namespace's byte limit
};

// Named entries (registered prefixes: pinned by default, optional TTL) and automatic entries
// (prompts kept after prefill: unpinned, keyed by their tokens) in one store under one byte
// budget, all reachable by longest-prefix lookup through a token radix tree. Entries that
// are unpinned and unreferenced (nobody outside the store holds the snapshot) are evicted
// in retention order (lowest priority first, see retention.h; least recently used among
// equals) when a put needs room; pinned or referenced ones never are.
// Entries past their TTL are dropped at the start of the next call of any method. Every entry
// stored or removed, named or automatic, for whatever cause, is appended to events() in the
// order it happened.
// Thread-safe: every method may be called from any thread (gRPC threads list and get while
// the engine thread looks up). The store never touches tensors, but the last reference to a
// dropped snapshot may be released on the calling thread (outside the lock), freeing its
// tensors there.
class PrefixStore {
 public:
  // InvalidArgument when budget_bytes <= 0, model_fingerprint is empty or clock is null.
  // `clock` is not owned and must outlive the store.
  static absl::StatusOr<std::unique_ptr<PrefixStore>> Create(
      PrefixStoreOptions options, const base::Clock* clock = base::RealClock::Get());

  // Stores `snapshot` under the qualified `name` (in the namespace it names). The same name with
  // the same tokens (and encoder input, Snapshot::cross_attention) and options again is
  // idempotent: the existing entry (and its snapshot) stays
  // and its info is returned. Other content replaces the entry atomically (hits and created_at
  // start over; readers holding the old snapshot keep it). Makes the entry the most recently used.
  // Errors, with nothing changed: InvalidArgument (empty name, null snapshot, ttl <= 0);
  // FailedPrecondition naming both fingerprints when the snapshot's is not the store's;
  // ResourceExhausted with the bytes needed and available when it cannot fit even after evicting
  // every evictable entry (of its namespace, for the namespace's limit, naming
  // options.space_budget_name).
  absl::StatusOr<PrefixInfo> PutNamed(const std::string& name,
                                      std::shared_ptr<const Snapshot> snapshot,
                                      const NamedPrefixOptions& options = {});
  // The named snapshot, or null when absent or expired (a named miss). A hit counts on the
  // entry and makes it the most recently used.
  std::shared_ptr<const Snapshot> GetNamed(const std::string& name);
  // The named snapshot without counting a hit or touching LRU; null when absent.
  std::shared_ptr<const Snapshot> PeekNamed(const std::string& name);
  // The named entry's info without counting a hit or touching LRU; nullopt when absent.
  std::optional<PrefixInfo> Info(const std::string& name);
  // Every named entry, sorted by name.
  std::vector<PrefixInfo> List();
  // Every entry, named and automatic, with its tokens (for admins and tests: copies every
  // entry's tokens under the lock).
  StoreListing ListEntries();
  // Removes the named entry; false when absent. Readers holding its snapshot keep it.
  bool DeleteNamed(const std::string& name);
  // Puts back a named entry a caller removed (the undo of a deletion that could not be
  // recorded): `snapshot` under `info.name` with info's options, created_at and hits, when the
  // name is absent and it fits. False, changing nothing, otherwise.
  bool RestoreNamed(const PrefixInfo& info, std::shared_ptr<const Snapshot> snapshot);

  // Keeps `snapshot` as an unpinned automatic entry of namespace `space` (of class
  // `retention`, counted `hits` times before: an entry promoted back from a tier keeps its
  // class and hits), evicting evictable
  // entries in retention order to fit. Returns false, changing nothing, when the snapshot is null,
  // has another fingerprint, is covered by an entry of either kind (of `space` or the shared
  // namespace) with equal or longer tokens starting with its tokens, or cannot fit. The new
  // entry becomes the most recently used.
  bool PutAutomatic(std::string_view space, std::shared_ptr<const Snapshot> snapshot,
                    RetentionClass retention = RetentionClass::kNormal, int64_t hits = 0);

  // The longest usable stored prefix of `tokens` over the entries, named and automatic, of
  // namespace `space` and the shared namespace (never another tenant's). It
  // leaves at least the last token uncovered (num_tokens <= tokens.size() - 1) and is at
  // least max(min_tokens, 1) long, else the match is empty. allow_partial (full-attention
  // models): the match may end inside a stored entry; otherwise it ends exactly where a
  // stored entry ends. Among entries that serve the same match, named ones win (smallest
  // name first). Counts a hit on the entry used (or an automatic miss) and makes it the
  // most recently used.
  PrefixMatch Lookup(std::string_view space, absl::Span<const int32_t> tokens, int64_t min_tokens,
                     bool allow_partial);
  // The match Lookup would return, without counting a hit or a miss or touching the LRU order.
  PrefixMatch Peek(std::string_view space, absl::Span<const int32_t> tokens, int64_t min_tokens,
                   bool allow_partial);
  // Counts the use of a match Peek returned (or of a named snapshot a caller held: a match
  // with named set, the name and its snapshot): a hit on its entry, which becomes the most
  // recently used, when the entry still holds that snapshot; an automatic miss for an empty
  // match.
  void RecordUse(const PrefixMatch& match);
  // Counts a named query that reused nothing of its named entry (a named miss).
  void RecordNamedMiss();

  // The retention priority (retention.h) of the entry Reclaim would evict first; nullopt when
  // every entry is pinned or referenced.
  std::optional<double> LowestReclaimablePriority();
  // Evicts unpinned, unreferenced entries in retention order until at least `bytes`
  // of snapshots are freed or none is left to evict (to make room for live caches under a
  // shared device budget). Returns the bytes freed.
  int64_t Reclaim(int64_t bytes);
  // Bytes Reclaim could free now (snapshots held only by unpinned, unreferenced entries).
  int64_t ReclaimableBytes();

  // Whether an entry holds `snapshot` (its bytes count in stats().bytes_used).
  bool Holds(const Snapshot* snapshot);
  // Every automatic entry, least recently used first (a graceful stop persists them).
  std::vector<AutomaticEntry> AutomaticEntries();

  PrefixStoreStats stats();
  // The log of entries stored and removed (see PrefixEventLog).
  PrefixEventLog& events() { return events_; }
  // Changes whenever a named entry is stored, removed or hit: the published catalog is stale.
  uint64_t named_generation();
  // Bytes the entries of namespace `space` hold (each snapshot once).
  int64_t space_bytes(std::string_view space);
  const PrefixStoreOptions& options() const { return options_; }

 private:
  using EntryId = TokenRadixTree::EntryId;
  // What a call releases, dropped after the lock: snapshots whose last reference may free
  // tensors.
  struct Released {
    ~Released() {
      for (AutomaticEntry& e : evicted) (*on_evicted)(std::move(e));
    }
    std::vector<std::shared_ptr<const Snapshot>> snapshots;
    // Entries evicted, for options_.on_evicted (set when there is one).
    const decltype(PrefixStoreOptions::on_evicted)* on_evicted = nullptr;
    std::vector<AutomaticEntry> evicted;
  };

  struct Entry {
    std::shared_ptr<const Snapshot> snapshot;
    std::string space;  // its namespace
    bool named = false;
    std::string name;  // empty for automatic entries
    NamedPrefixOptions options;
    absl::Time created_at;
    absl::Time last_used_at;
    int64_t hits = 0;
    std::list<EntryId>::iterator lru_position;
    std::optional<std::multimap<absl::Time, EntryId>::iterator> expiry_position;
  };

  PrefixStore(PrefixStoreOptions options, const base::Clock* clock);

  // Peek under the lock.
  PrefixMatch PeekLocked(std::string_view space, absl::Span<const int32_t> tokens,
                         int64_t min_tokens, bool allow_partial) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RecordUseLocked(const PrefixMatch& match, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops every entry whose TTL has run out at `now`.
  void DropExpiredLocked(absl::Time now, Released* released) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes entry `id` from every index and logs why; its snapshot goes to `released` when no
  // other entry holds it.
  void RemoveLocked(EntryId id, RemovalCause cause, Released* released)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds an entry, logs it and returns its id.
  EntryId InsertLocked(Entry entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void TouchLocked(Entry& entry, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every entry, lowest retention priority first (least recently used first among equals).
  std::vector<EntryId> EvictionOrderLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // True when someone outside the store holds the entry's snapshot.
  bool ReferencedLocked(const Entry& entry) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Plans room for `snapshot` in namespace `space` without changing anything: the LRU
  // evictable entries to evict (never `replaced`, the entry the put replaces, if any): first
  // the namespace's own, to keep within its limit, then any, to keep within the budget; or
  // ResourceExhausted naming `what` with the bytes needed and available.
  absl::StatusOr<std::vector<EntryId>> PlanRoomLocked(const Snapshot& snapshot,
                                                      std::string_view space,
                                                      std::optional<EntryId> replaced,
                                                      const std::string& what) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Bytes of namespace `space` (each snapshot once).
  int64_t SpaceBytesLocked(std::string_view space) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  PrefixInfo InfoLocked(const Entry& entry) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const PrefixStoreOptions options_;
  const base::Clock* const clock_;

  mutable absl::Mutex mu_;
  // Node-based, so references to entries stay valid while others are added and removed.
  std::unordered_map<EntryId, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, EntryId> named_ ABSL_GUARDED_BY(mu_);  // sorted for List()
  // One tree per namespace, so a lookup never sees another tenant's tokens.
  std::map<std::string, TokenRadixTree, std::less<>> trees_ ABSL_GUARDED_BY(mu_);
  std::list<EntryId> lru_ ABSL_GUARDED_BY(mu_);                       // least recently used first
  std::multimap<absl::Time, EntryId> expiries_ ABSL_GUARDED_BY(mu_);  // finite-TTL entries
  // How many entries hold each snapshot (a snapshot's bytes count once).
  std::unordered_map<const Snapshot*, int> holders_ ABSL_GUARDED_BY(mu_);
  // Per namespace: how many of its entries hold each snapshot, and the bytes they hold.
  struct SpaceUsage {
    std::unordered_map<const Snapshot*, int> holders;
    int64_t bytes = 0;
  };
  std::map<std::string, SpaceUsage, std::less<>> spaces_ ABSL_GUARDED_BY(mu_);
  EntryId next_id_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t bytes_used_ ABSL_GUARDED_BY(mu_) = 0;
  PrefixStoreStats counters_ ABSL_GUARDED_BY(mu_);  // hits, misses, evictions, expirations
  uint64_t named_generation_ ABSL_GUARDED_BY(mu_) = 0;
  PrefixEventLog events_;
};

}  // namespace kvserve::cache
