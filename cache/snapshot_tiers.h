// SnapshotTiers: where automatic prefix snapshots go when the device store evicts them (host
// memory, then files on disk), how they come back (promotion), and which ones are kept
// (retention priority).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "base/clock.h"
#include "cache/prefix_info.h"
#include "cache/retention.h"
#include "cache/snapshot_file.h"
#include "cache/token_radix_tree.h"

namespace kvserve::cache {

class MemoryPressure;
class PrefixStore;
class Snapshot;

struct SnapshotTiersOptions {
  // --prefix-host-bytes: the most bytes of snapshots kept in host memory after the device store
  // evicted them; 0: no host tier (evicted snapshots go straight to disk). >= 0. On a CPU-only
  // build "device" and "host" are the same memory: the host tier then keeps the evicted
  // snapshot's tensors as they are, outside the device budget (--kv-device-bytes) and the
  // prefix cache's (--prefix-cache-bytes), bounded by this budget alone. With CUDA they are
  // copied to host memory.
  int64_t host_bytes = 0;
  // --prefix-disk-bytes: the most bytes of snapshot files kept in `disk_dir`; 0: no disk
  // tier. >= 0; > 0 needs disk_dir.
  int64_t disk_bytes = 0;
  // --prefix-disk-dir: the folder of snapshot files (created when absent). Files found there at
  // start (a restart) are entries again; files that are corrupt, truncated or written for
  // another model or strategy are removed with a log line.
  std::string disk_dir;
  // What a file must have been written for (the serving model and the strategy fingerprint).
  SnapshotFileIdentity identity;
  // Retention: an entry's priority is weight(class) * (1 + hits) * 2^(-age / half_life), age
  // since its last use (retention.h, the device store's order too); the lowest priority
  // leaves a full tier first. > 0.
  absl::Duration half_life = absl::Minutes(10);
  // The device snapshots are promoted to ("cpu" on a CPU-only build).
  std::string device = "cpu";
  // Where refusals and failed writes are reported; stderr when empty.
  std::function<void(const std::string&)> log;
};

enum class SnapshotTier { kHost, kDisk };

// A demoted entry that covers more of a prompt than the device store does.
struct TierMatch {
  uint64_t id = 0;
  int64_t num_tokens = 0;  // tokens of the prompt the entry covers
  SnapshotTier tier = SnapshotTier::kHost;
};

// A snapshot loaded back for the device store.
struct PromotedSnapshot {
  uint64_t id = 0;
  std::string space;
  std::shared_ptr<const Snapshot> snapshot;
  int64_t hits = 0;
  RetentionClass retention = RetentionClass::kNormal;
  SnapshotTier from = SnapshotTier::kHost;
  // A named prefix's description when the entry was one: it goes back into the store as that
  // named prefix (unless the name was registered again meanwhile).
  std::optional<PrefixInfo> named;
};

// A named prefix a tier holds, as the catalog lists it.
struct DemotedPrefix {
  PrefixInfo info;
  std::string space;
  std::vector<int32_t> tokens;
  SnapshotTier tier = SnapshotTier::kHost;
};

struct SnapshotTiersStats {
  int64_t host_entries = 0;
  int64_t host_bytes = 0;
  int64_t host_budget_bytes = 0;
  int64_t disk_entries = 0;  // written or being written
  int64_t disk_bytes = 0;
  int64_t disk_budget_bytes = 0;
  int64_t demotions = 0;     // snapshots the device store evicted that a tier kept
  int64_t host_to_disk = 0;  // host entries that left for disk
  int64_t disk_writes = 0;   // files written
  int64_t disk_write_failures = 0;
  int64_t too_large = 0;        // snapshots larger than a whole tier
  int64_t host_promotions = 0;  // promotions served from host memory
  int64_t disk_loads = 0;       // promotions served by reading a file
  int64_t dropped = 0;          // entries that left the last tier
  int64_t refused_files = 0;    // corrupt, truncated, foreign or mismatching files removed
  int64_t recovered_files = 0;  // files found at start
};

// Thread-safe. Disk writes and reads run on one background thread of its own; everything else
// is quick and may be called from any thread (in practice the engine thread). Entries are
// keyed by (namespace, tokens): one entry per prompt, whichever tiers hold it.
class SnapshotTiers {
 public:
  // InvalidArgument naming the flag for a bad option; Internal when disk_dir cannot be made.
  // Scans disk_dir (headers only). `clock` must outlive the tiers.
  static absl::StatusOr<std::unique_ptr<SnapshotTiers>> Create(
      SnapshotTiersOptions options, const base::Clock* clock = base::RealClock::Get());
  // Writes what only the host tier holds and finishes queued disk writes (so that a graceful
  // stop keeps them), then stops its thread.
  ~SnapshotTiers();
  SnapshotTiers(const SnapshotTiers&) = delete;
  SnapshotTiers& operator=(const SnapshotTiers&) = delete;

  // An entry of namespace `space` the device store evicted (used `hits` times; automatic, or a
  // named prefix's tokens with its class, kept for prompts that start with them): kept
  // on the host tier, or written to disk when there is no host tier or it does not fit there.
  // Host entries of lower priority leave for disk (or are dropped) to make room. A snapshot
  // larger than every tier is dropped (counted in too_large).
  // Encoder-decoder captures (Snapshot::cross_attention) are not kept (dropped as without
  // tiers). A named prefix's entry keeps its description (`named`): it is listed by NamedEntries,
  // its file keeps the name, class, TTL and creation time, and it leaves every tier when its TTL
  // runs out.
  void Demote(std::string space, std::shared_ptr<const Snapshot> snapshot, int64_t hits,
              RetentionClass retention = RetentionClass::kNormal,
              std::optional<PrefixInfo> named = std::nullopt);
  // Writes `snapshot` to disk unless its entry already has a file (a graceful stop keeping what
  // the device store holds). Queued; the destructor waits for it.
  void Persist(std::string space, std::shared_ptr<const Snapshot> snapshot, int64_t hits,
               RetentionClass retention = RetentionClass::kNormal,
               std::optional<PrefixInfo> named = std::nullopt);

  // The named prefixes the tiers hold (demoted, or found on disk at start), sorted by name;
  // those whose TTL ran out leave first.
  std::vector<DemotedPrefix> NamedEntries();
  // Removes the named prefix `name` (qualified) from every tier, its file included, and returns
  // its description; nullopt when no tier holds it. An entry being promoted loses its name (it
  // comes back unnamed).
  std::optional<PrefixInfo> ForgetNamed(std::string_view name);
  // Changes whenever a named entry arrives in or leaves the tiers (the catalog is stale).
  uint64_t named_generation();

  // The demoted entry of namespace `space` or the shared one covering the most of `tokens`
  // (at most tokens.size() - 1 of them), when that is more than `longer_than` and at least
  // `min_tokens`; with allow_partial the cover may end inside the entry. nullopt otherwise.
  std::optional<TierMatch> Find(std::string_view space, absl::Span<const int32_t> tokens,
                                int64_t min_tokens, int64_t longer_than, bool allow_partial);
  // Starts bringing entry `id` back (a host entry at once, a disk entry by a background read).
  // Idempotent: an entry already on its way is loaded once however many callers ask.
  void Promote(uint64_t id);
  // True while entry `id`'s promotion is under way or waits in TakePromoted.
  bool Pending(uint64_t id);
  // The promotions finished since the last call (each counts as a hit on its entry). Host
  // entries leave the host tier; disk files stay. A failed read removes the file and the
  // entry with a log line, and is not returned.
  std::vector<PromotedSnapshot> TakePromoted();

  // Puts the promotions finished since the last call (TakePromoted) into `store`, making room
  // on the device through `pressure` first: a named prefix as itself (unless its name was
  // registered again meanwhile), others as automatic entries; what does not fit goes back to
  // the tiers. Engine thread.
  void StorePromoted(PrefixStore& store, MemoryPressure& pressure);

  // Waits until no background work is queued or running (tests and benchmarks).
  void WaitIdle();
  SnapshotTiersStats stats();

 private:
  using EntryId = TokenRadixTree::EntryId;
  struct Entry {
    std::string space;
    std::vector<int32_t> tokens;
    int64_t hits = 0;
    RetentionClass retention = RetentionClass::kNormal;
    std::optional<PrefixInfo> named;
    absl::Time last_used;
    std::shared_ptr<const Snapshot> host;  // on the host tier (null: not)
    int64_t host_bytes = 0;
    // Disk: a file written (or being written, `writing` holding the snapshot until it is).
    bool on_disk = false;
    std::shared_ptr<const Snapshot> writing;
    int64_t file_bytes = 0;
    bool loading = false;  // a promotion under way or waiting in ready_
  };
  struct Job {
    EntryId id = 0;
    bool write = false;  // else a read (promotion)
  };

  SnapshotTiers(SnapshotTiersOptions options, const base::Clock* clock);
  void Scan();
  void Log(const std::string& message);
  std::string PathOf(const Entry& entry) const;
  double PriorityLocked(const Entry& entry, absl::Time now) const;
  // The entry of (space, tokens), or 0.
  EntryId FindExactLocked(std::string_view space, absl::Span<const int32_t> tokens) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  EntryId AddLocked(std::string space, std::vector<int32_t> tokens, int64_t hits)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets the entry when no tier holds it any longer; true when it did.
  bool MaybeEraseLocked(EntryId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues a file of `snapshot` for entry `id`, making room under the disk budget.
  void QueueWriteLocked(EntryId id, std::shared_ptr<const Snapshot> snapshot)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Evicts host entries of lowest priority (to disk when there is one) until `bytes` fit.
  void MakeHostRoomLocked(int64_t bytes, EntryId keep) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes files of lowest priority until `bytes` fit; false when they cannot.
  bool MakeDiskRoomLocked(int64_t bytes, EntryId keep) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveFileLocked(EntryId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes entry `id` from every tier (a load under way finishes, unnamed).
  void RemoveEntryLocked(EntryId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes the named entries whose TTL ran out at `now`.
  void DropExpiredLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Run();

  const SnapshotTiersOptions options_;
  const base::Clock* const clock_;

  absl::Mutex mu_;
  std::unordered_map<EntryId, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, TokenRadixTree, std::less<>> trees_ ABSL_GUARDED_BY(mu_);
  EntryId next_id_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t named_generation_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t host_used_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t disk_used_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<Job> jobs_ ABSL_GUARDED_BY(mu_);
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<PromotedSnapshot> ready_ ABSL_GUARDED_BY(mu_);
  SnapshotTiersStats counters_ ABSL_GUARDED_BY(mu_);
  std::thread worker_;
};

}  // namespace kvserve::cache
