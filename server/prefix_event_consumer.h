// PrefixEventConsumer: one of the engine's consumers of the prefix store's event log (the
// KV-event publisher, tiers), handed every drained event beside the PrefixRegistrar.
#pragma once

#include "absl/types/span.h"
#include "cache/prefix_events.h"

namespace kvserve::server {

class PrefixEventConsumer {
 public:
  virtual ~PrefixEventConsumer() = default;
  // The events drained from the log since the previous call, in order (sequence numbers
  // without holes across calls). Engine thread; must not block.
  virtual void Consume(absl::Span<const cache::PrefixEvent> events) = 0;
};

}  // namespace kvserve::server
