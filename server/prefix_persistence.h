// PrefixPersistence: where the engine records the named-prefix catalog's changes so that a
// restarted server registers the same prefixes again.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "cache/prefix_store.h"

namespace kvserve::server {

// Implementations never block the caller on I/O: a record is queued and `done` (may be null)
// is called later, from any thread, with OK once it is durable or Internal "could not save
// the prefix state: ..." (no server paths). Records of one instance become durable in the
// order they were made. Thread-safe.
class PrefixPersistence {
 public:
  using Done = std::function<void(absl::Status)>;
  virtual ~PrefixPersistence() = default;

  // The named prefix `name` now holds `token_ids` with `options`, created at `created_at`
  // (its TTL counts from then).
  virtual void RecordPut(const std::string& name, std::vector<int32_t> token_ids,
                         const cache::NamedPrefixOptions& options, absl::Time created_at,
                         Done done) = 0;
  // The named prefix `name` is gone.
  virtual void RecordDelete(const std::string& name, Done done) = 0;
};

}  // namespace kvserve::server
