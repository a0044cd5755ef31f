// Shared prefix segments: how a prefix reaches a request's cache (copied or read in place),
// and the count of the snapshots live caches read in place.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <unordered_map>

#include "absl/status/statusor.h"

namespace kvserve::cache {

class Snapshot;

// How a cached prefix reaches a request's cache (--prefix-kv-mode, CacheOptions.prefix_kv_mode).
//
// kShared: layers whose strategy never rewrites its past in place read the snapshot's K/V in
// place (one copy for every request on the prefix) and append their own tail; the others copy.
// Where sharing is allowed, and why the copy stays elsewhere:
//   - dynamic full-attention layers share: they only append, truncate and select rows, so a
//     crop into the prefix copies what stays (copy on write) and nothing else writes to it;
//   - dynamic sliding-window and chunked layers share while the prefix lies inside what they
//     keep: dropping their oldest tokens only moves where the kept part of the segment
//     starts, and once the window has moved past it they let it go;
//   - static (and static sliding) layers copy: they preallocate every slot and write tokens
//     into them in place, so a prefix would still occupy its slots in every request;
//   - quantized layers copy: they quantize the prefix together with the first tokens after it
//     and requantize their residual, which rewrites the past;
//   - offloaded layers copy: their storage moves between host and device per layer, and a
//     device-resident shared segment would not be offloaded with it.
// kCopy: every layer copies (the deep-copy contract every strategy supports).
enum class PrefixKvMode { kCopy, kShared };

// "copy" or "shared".
std::string_view PrefixKvModeName(PrefixKvMode mode);
// The mode a flag or request names: "copy" or "shared"; InvalidArgument otherwise.
absl::StatusOr<PrefixKvMode> ParsePrefixKvMode(std::string_view name);

// The snapshots that live caches (requests' and sessions') read in place, each with how many
// holders it has. A snapshot the prefix store dropped (a deleted named prefix, an expired
// entry) while caches still read it stays in memory: its bytes must still count, once, until
// the last holder lets go. Engine thread (caches are created and destroyed there).
class SharedPrefixTracker : public std::enable_shared_from_this<SharedPrefixTracker> {
 public:
  // A holder's reference: keeps `snapshot` alive and counted until the returned pointer (and
  // its copies) are gone. The tracker must be owned by a std::shared_ptr; the reference keeps
  // only a weak one, so either may go first.
  std::shared_ptr<const void> Acquire(std::shared_ptr<const Snapshot> snapshot);

  // Bytes of the referenced snapshots for which `counted_elsewhere` is false (those the prefix
  // store no longer holds), each once.
  int64_t BytesNotIn(const std::function<bool(const Snapshot*)>& counted_elsewhere) const;
  // Distinct snapshots read in place now, and their holders.
  int64_t num_snapshots() const { return static_cast<int64_t>(refs_.size()); }
  int64_t num_holders(const Snapshot* snapshot) const;

 private:
  void Release(const Snapshot* snapshot);

  struct Count {
    int64_t bytes = 0;
    int64_t holders = 0;
  };
  std::unordered_map<const Snapshot*, Count> refs_;
};

}  // namespace kvserve::cache
