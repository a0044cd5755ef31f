// Retention: the one order in which prefix snapshots leave a tier, whichever tier (the device
// store, host memory, disk). An entry's priority is
//   weight(class) * (1 + hits) * 2^(-age / half_life)
// with `age` the time since its last use; the lowest priority leaves first. Light header (no
// LibTorch), shared by the store, the tiers and the request builder.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "absl/time/time.h"

namespace kvserve::cache {

// How strongly an unpinned entry is kept. A named prefix chooses one (RegisterPrefix's
// options.retention); automatic entries are kNormal. Pinned named prefixes are never evicted
// from the device store, whatever their class.
enum class RetentionClass {
  kLow,     // weight 1/4
  kNormal,  // weight 1
  kHigh,    // weight 4
};

// "low", "normal", "high".
std::string_view RetentionClassName(RetentionClass retention);
// The class of a name RetentionClassName gives; nullopt for anything else.
std::optional<RetentionClass> ParseRetentionClass(std::string_view name);
double RetentionWeight(RetentionClass retention);

// The priority of an entry of class `retention`, used `hits` times, last used at `last_used`,
// at `now` (an entry used in the future counts as used now). half_life > 0.
double RetentionPriority(RetentionClass retention, int64_t hits, absl::Time last_used,
                         absl::Time now, absl::Duration half_life);

}  // namespace kvserve::cache
