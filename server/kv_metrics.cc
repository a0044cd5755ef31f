// The KV cache manager's statistics as Prometheus metrics (see kv_metrics.h).
#include "server/kv_metrics.h"

#include <cstdint>
#include <map>
#include <utility>

#include "server/prefix_metrics.h"

namespace kvserve::server {

void PublishKvMetrics(const cache::KvCacheManagerStats& kv, const std::string& device,
                      ServerMetrics* metrics) {
  std::map<std::pair<std::string, std::string>, int64_t> by_strategy;
  for (const auto& [strategy, usage] : kv.by_strategy) {
    by_strategy[{strategy, device}] += usage.device_bytes;
    by_strategy[{strategy, "host"}] += usage.host_bytes;
  }
  metrics->SetKvBytes(by_strategy);
  metrics->SetKvDeviceBudget(kv.budget_used, kv.budget_limit);
  const cache::SessionStats& sessions = kv.sessions;
  metrics->SetSessionCounts({.live = sessions.live,
                             .offloaded = sessions.offloaded,
                             .device_bytes = sessions.memory.device_bytes,
                             .host_bytes = sessions.memory.host_bytes,
                             .evictions = sessions.evictions,
                             .expirations = sessions.expirations,
                             .hits = sessions.hits,
                             .misses = sessions.misses});
  PublishPrefixMetrics(kv.prefixes, kv.tiers, *metrics);
}

}  // namespace kvserve::server
