// The KV cache manager's statistics as Prometheus metrics (bytes per strategy and device, the
// device budget, sessions, prefixes): what the engine publishes after each step.
#pragma once

#include <string>

#include "cache/kv_cache_manager.h"
#include "server/metrics.h"

namespace kvserve::server {

// Sets the KV, session and prefix metrics of `metrics` from `kv`; `device` names the model's
// device (live caches' device bytes are labelled with it, their host bytes with "host").
void PublishKvMetrics(const cache::KvCacheManagerStats& kv, const std::string& device,
                      ServerMetrics* metrics);

}  // namespace kvserve::server
