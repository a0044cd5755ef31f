// PrefixEventLog: the ordered, typed log of what the prefix store keeps and drops, drained once
// per engine step by whoever publishes it (the journal of named prefixes, KV-event subscribers,
// tiers).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cache/prefix_info.h"

namespace kvserve::cache {

enum class PrefixEventKind {
  kStored,   // an entry now holds `tokens`
  kRemoved,  // the entry that held `tokens` is gone
  kCleared,  // everything is gone (a start, or a flush): consumers forget what they knew
};

// Why an entry was removed.
enum class RemovalCause {
  kNone,      // not a removal
  kDeleted,   // a client's deletion (or the undo of a registration that could not be saved)
  kReplaced,  // a named entry got other content; a kStored of the same name follows at once
  kEvicted,   // room was needed (the store's budget, a tenant's limit, device memory)
  kExpired,   // its TTL ran out
};

// "stored", "removed", "cleared"; "deleted", "replaced", "evicted", "expired", "none".
std::string_view PrefixEventKindName(PrefixEventKind kind);
std::string_view RemovalCauseName(RemovalCause cause);

struct PrefixEvent {
  // 1, 2, 3, ... in the order the store made the changes, over the whole process.
  uint64_t sequence = 0;
  // Changes with every kCleared; the first epoch is the time the log was made (ms since the
  // Unix epoch), so that a restarted server's epochs are larger than its predecessor's.
  uint64_t epoch = 0;
  PrefixEventKind kind = PrefixEventKind::kStored;
  RemovalCause cause = RemovalCause::kNone;
  // A named entry (registered) or an automatic one (a prompt kept after its prefill).
  bool named = false;
  // The entry's namespace (a tenant's, or kSharedSpace) and, when named, its qualified name.
  std::string space;
  std::string name;
  // The tokens the entry covers (empty for kCleared); an encoder-decoder model's entry: its
  // encoder input (Snapshot::content_ids).
  std::vector<int32_t> tokens;
  // The store's id of the entry (stable for its life; 0 for kCleared).
  uint64_t entry_id = 0;
  // Named kStored: what the entry was kept with, and when this content was put (its TTL
  // counts from then).
  NamedPrefixOptions options;
  absl::Time created_at = absl::InfinitePast();
};

// Appended to under the store's own lock, drained by the engine thread. Thread-safe.
class PrefixEventLog {
 public:
  // Starts with a kCleared event of epoch `first_epoch` (> 0).
  explicit PrefixEventLog(uint64_t first_epoch);

  // Gives `event` the next sequence number and the current epoch and appends it; returns the
  // sequence number.
  uint64_t Append(PrefixEvent event) ABSL_LOCKS_EXCLUDED(mu_);
  // Starts a new epoch with a kCleared event; returns its sequence number.
  uint64_t Clear() ABSL_LOCKS_EXCLUDED(mu_);
  // Every event appended since the previous Drain, in order.
  std::vector<PrefixEvent> Drain() ABSL_LOCKS_EXCLUDED(mu_);

  uint64_t last_sequence() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t epoch() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  uint64_t next_sequence_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t epoch_ ABSL_GUARDED_BY(mu_);
  std::vector<PrefixEvent> pending_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvserve::cache
