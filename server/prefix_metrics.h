// The prefix cache's metrics from the cache's counts: the store's (kind named / automatic) and
// the tiers' (device, host, disk). Kept beside the engine so that its loop publishes both with
// one call.
#pragma once

#include "cache/prefix_store.h"
#include "cache/snapshot_tiers.h"
#include "server/metrics.h"

namespace kvserve::server {

// ServerMetrics::SetPrefixCounts and SetPrefixTierCounts from the store's and the tiers'
// cumulative stats (tiers all zero without tiers).
void PublishPrefixMetrics(const cache::PrefixStoreStats& store,
                          const cache::SnapshotTiersStats& tiers, ServerMetrics& metrics);

}  // namespace kvserve::server
