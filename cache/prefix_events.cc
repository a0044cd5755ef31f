// The prefix store's event log (see prefix_events.h).
#include "cache/prefix_events.h"

#include <utility>

namespace kvserve::cache {

std::string_view PrefixEventKindName(PrefixEventKind kind) {
  switch (kind) {
    case PrefixEventKind::kStored:
      return "stored";
    case PrefixEventKind::kRemoved:
      return "removed";
    case PrefixEventKind::kCleared:
      return "cleared";
  }
  return "unknown";
}

std::string_view RemovalCauseName(RemovalCause cause) {
  switch (cause) {
    case RemovalCause::kNone:
      return "none";
    case RemovalCause::kDeleted:
      return "deleted";
    case RemovalCause::kReplaced:
      return "replaced";
    case RemovalCause::kEvicted:
      return "evicted";
    case RemovalCause::kExpired:
      return "expired";
  }
  return "unknown";
}

PrefixEventLog::PrefixEventLog(uint64_t first_epoch) : epoch_(first_epoch) {
  PrefixEvent cleared;
  cleared.kind = PrefixEventKind::kCleared;
  cleared.sequence = next_sequence_++;
  cleared.epoch = epoch_;
  pending_.push_back(std::move(cleared));
}

uint64_t PrefixEventLog::Append(PrefixEvent event) {
  absl::MutexLock lock(&mu_);
  event.sequence = next_sequence_++;
  event.epoch = epoch_;
  pending_.push_back(std::move(event));
  return pending_.back().sequence;
}

uint64_t PrefixEventLog::Clear() {
  absl::MutexLock lock(&mu_);
  PrefixEvent cleared;
  cleared.kind = PrefixEventKind::kCleared;
  cleared.sequence = next_sequence_++;
  cleared.epoch = ++epoch_;
  pending_.push_back(std::move(cleared));
  return pending_.back().sequence;
}

std::vector<PrefixEvent> PrefixEventLog::Drain() {
  absl::MutexLock lock(&mu_);
  std::vector<PrefixEvent> drained;
  drained.swap(pending_);
  return drained;
}

uint64_t PrefixEventLog::last_sequence() const {
  absl::MutexLock lock(&mu_);
  return next_sequence_ - 1;
}

uint64_t PrefixEventLog::epoch() const {
  absl::MutexLock lock(&mu_);
  return epoch_;
}

}  // namespace kvserve::cache
