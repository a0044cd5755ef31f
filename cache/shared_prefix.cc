// Prefix modes and the count of shared snapshots (see shared_prefix.h).
#include "cache/shared_prefix.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cache/snapshot.h"

namespace kvserve::cache {

std::string_view PrefixKvModeName(PrefixKvMode mode) {
  return mode == PrefixKvMode::kShared ? "shared" : "copy";
}

absl::StatusOr<PrefixKvMode> ParsePrefixKvMode(std::string_view name) {
  if (name == "shared") return PrefixKvMode::kShared;
  if (name == "copy") return PrefixKvMode::kCopy;
  return absl::InvalidArgumentError(absl::StrCat(
      "prefix_kv_mode must be \"copy\" or \"shared\", got \"", std::string(name), "\""));
}

namespace {

// What a holder keeps: the snapshot, and the tracker to tell when it lets go.
struct Hold {
  std::shared_ptr<const Snapshot> snapshot;
  std::weak_ptr<SharedPrefixTracker> tracker;
};

}  // namespace

std::shared_ptr<const void> SharedPrefixTracker::Acquire(std::shared_ptr<const Snapshot> snapshot) {
  Count& count = refs_[snapshot.get()];
  count.bytes = snapshot->bytes();
  ++count.holders;
  auto* hold = new Hold{std::move(snapshot), weak_from_this()};
  return std::shared_ptr<const void>(hold, [](const void* p) {
    const Hold* h = static_cast<const Hold*>(p);
    if (std::shared_ptr<SharedPrefixTracker> tracker = h->tracker.lock()) {
      tracker->Release(h->snapshot.get());
    }
    delete h;
  });
}

void SharedPrefixTracker::Release(const Snapshot* snapshot) {
  auto it = refs_.find(snapshot);
  if (it == refs_.end()) return;
  if (--it->second.holders <= 0) refs_.erase(it);
}

int64_t SharedPrefixTracker::BytesNotIn(
    const std::function<bool(const Snapshot*)>& counted_elsewhere) const {
  int64_t bytes = 0;
  for (const auto& [snapshot, count] : refs_) {
    if (!counted_elsewhere(snapshot)) bytes += count.bytes;
  }
  return bytes;
}

int64_t SharedPrefixTracker::num_holders(const Snapshot* snapshot) const {
  auto it = refs_.find(snapshot);
  return it == refs_.end() ? 0 : it->second.holders;
}

}  // namespace kvserve::cache
