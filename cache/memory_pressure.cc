// The order in which device KV memory is given back (see memory_pressure.h).
#include "cache/memory_pressure.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "cache/kv_cache.h"
#include "cache/kv_memory_budget.h"
#include "cache/prefix_store.h"
#include "cache/session_table.h"
#include "cache/shared_prefix.h"
#include "cache/torch_compat.h"

namespace kvserve::cache {

void MemoryPressure::SyncSnapshotBytes() {
  int64_t bytes = store_->stats().bytes_used;
  if (shared_ != nullptr) {
    bytes += shared_->BytesNotIn([this](const Snapshot* s) { return store_->Holds(s); });
  }
  budget_->Add(bytes - snapshot_bytes_accounted_);
  snapshot_bytes_accounted_ = bytes;
}

int64_t MemoryPressure::FreeableBytes() const {
  return store_->ReclaimableBytes() + sessions_->IdleDeviceBytes();
}

bool MemoryPressure::MakeRoom(int64_t bytes) {
  if (budget_->limit() < 0) return true;
  // Snapshots and idle sessions in one retention order: whichever is worth less goes first,
  // one at a time (a snapshot leaves the store, for a lower tier when there is one; a
  // session's cache moves to the host).
  while (budget_->available() < bytes) {
    const std::optional<double> snapshot = store_->LowestReclaimablePriority();
    const std::optional<double> session = sessions_->LowestIdlePriority();
    if (snapshot && (!session || *snapshot <= *session)) {
      store_->Reclaim(1);
      SyncSnapshotBytes();
    } else if (!session || sessions_->OffloadIdle(1) == 0) {
      break;
    }
  }
  return budget_->available() >= bytes;
}

OutOfMemoryAction MemoryPressure::OnOutOfMemory(absl::Span<const LiveCache> live) {
  compat::EmptyDeviceCache();
  OutOfMemoryAction action;
  // Snapshots nobody uses go first: they are a cache of work, live caches are requests. All
  // of them: the step was rolled back, so how much more it needed is unknown (the budget is
  // back under its limit by now).
  const int64_t reclaimed = store_->Reclaim(std::numeric_limits<int64_t>::max());
  SyncSnapshotBytes();
  if (reclaimed > 0) {
    action.reclaimed_snapshots = true;
    return action;
  }
  // Then idle sessions' caches, which wait for a later turn, move to the host.
  if (sessions_->OffloadIdle(std::numeric_limits<int64_t>::max()) > 0) {
    action.offloaded_idle_sessions = true;
    return action;
  }
  const LiveCache* largest = nullptr;
  for (const LiveCache& c : live) {
    if (c.cache == nullptr || c.cache->fully_offloaded()) continue;
    if (largest == nullptr || c.device_bytes > largest->device_bytes ||
        (c.device_bytes == largest->device_bytes && c.id < largest->id)) {
      largest = &c;
    }
  }
  if (largest != nullptr) {
    largest->cache->ConvertToOffloaded();
    action.offloaded = largest->id;
    action.offloaded_bytes = largest->device_bytes;
    return action;
  }
  // Nothing left to move: the sequence of the step holding the most bytes fails alone.
  int64_t victim_bytes = -1;
  for (const LiveCache& c : live) {
    if (!c.in_step) continue;
    const int64_t bytes = c.cache != nullptr ? c.cache->Memory().total() : 0;
    if (bytes > victim_bytes) {
      action.victim = c.id;
      victim_bytes = bytes;
    }
  }
  if (action.victim) {
    action.reason =
        absl::StrCat("out of KV memory even with every cache offloaded: this request holds ",
                     victim_bytes, " bytes of KV and its step needed more (budget ",
                     budget_->limit(), " bytes, --kv-device-bytes)");
  }
  return action;
}

}  // namespace kvserve::cache
