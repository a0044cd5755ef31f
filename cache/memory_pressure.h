// MemoryPressure: the one order in which device KV memory is given back when it runs short:
// prefix snapshots nobody uses and idle sessions' caches (to the host), in retention order,
// then the largest live cache (offloaded), and only then a request that must fail.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/types/span.h"

namespace kvserve::cache {

class KvCache;
class KvMemoryBudget;
class PrefixStore;
class SessionTable;
class SharedPrefixTracker;

// The engine's id of a sequence (a request or a prefix registration).
using SequenceId = uint64_t;

// The outcome of an out-of-memory error in a step (see MemoryPressure::OnOutOfMemory).
struct OutOfMemoryAction {
  // Prefix snapshots nobody used were dropped: run the step again.
  bool reclaimed_snapshots = false;
  // A cache moved to its offloaded form (it held `offloaded_bytes` on the device, or will):
  // run the step again.
  std::optional<SequenceId> offloaded;
  int64_t offloaded_bytes = 0;
  // Idle sessions' caches moved to the host: run the step again.
  bool offloaded_idle_sessions = false;
  // Nothing could be moved: this sequence of the step must fail (RESOURCE_EXHAUSTED, with
  // `reason`); run the step again without it.
  std::optional<SequenceId> victim;
  std::string reason;
};

// A live sequence's cache as the out-of-memory order weighs it.
struct LiveCache {
  SequenceId id = 0;
  KvCache* cache = nullptr;
  // What it holds on the device now, or will hold (the larger): a cache still empty after a
  // failed first step is weighed by its estimate.
  int64_t device_bytes = 0;
  bool in_step = false;  // one of the failed step's sequences
};

// Keeps the budget's count of snapshot bytes and applies the order. Engine thread; the budget,
// store and sessions must outlive it.
class MemoryPressure {
 public:
  // `shared` (may be null) counts the snapshots caches read in place.
  MemoryPressure(KvMemoryBudget* budget, PrefixStore* store, SessionTable* sessions,
                 const SharedPrefixTracker* shared = nullptr)
      : budget_(budget), store_(store), sessions_(sessions), shared_(shared) {}

  // Brings the budget's count of snapshot bytes up to date: the store's, plus those of
  // snapshots the store dropped while caches still read them in place (each once; they free
  // nothing until the last reader lets go). Entries past their TTL leave inside any call to
  // the store. Call after every change to the store and once per step.
  void SyncSnapshotBytes();

  // Device bytes MakeRoom could free now (unused snapshots, idle sessions' device bytes).
  int64_t FreeableBytes() const;
  // Makes `bytes` available under the limit when it can: unused snapshots leave the store and
  // idle sessions' caches move to the host in one retention order (retention.h; the lowest
  // priority first, a snapshot before a session of equal priority). Returns whether `bytes`
  // are available now. Always true without a limit.
  bool MakeRoom(int64_t bytes);

  // After an out-of-memory error in a step (rolled back): drops every unused snapshot, else
  // moves idle sessions' caches to the host, else converts the live cache with the most device
  // bytes (ties: the lowest id) to its offloaded form, else names the step's sequence holding
  // the most bytes (the first in `live`'s order on a tie) as the one to fail.
  OutOfMemoryAction OnOutOfMemory(absl::Span<const LiveCache> live);

 private:
  KvMemoryBudget* const budget_;
  PrefixStore* const store_;
  SessionTable* const sessions_;
  const SharedPrefixTracker* const shared_;
  int64_t snapshot_bytes_accounted_ = 0;  // what the budget counts for the store
};

}  // namespace kvserve::cache
