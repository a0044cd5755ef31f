// The prefix cache's metrics (see prefix_metrics.h).
#include "server/prefix_metrics.h"

namespace kvserve::server {

void PublishPrefixMetrics(const cache::PrefixStoreStats& p, const cache::SnapshotTiersStats& t,
                          ServerMetrics& metrics) {
  metrics.SetPrefixCounts({.named_hits = p.named_hits,
                           .named_misses = p.named_misses,
                           .automatic_hits = p.automatic_hits,
                           .automatic_misses = p.automatic_misses,
                           .evictions = p.evictions,
                           .expirations = p.expirations,
                           .bytes = p.bytes_used,
                           .named_entries = p.named_entries,
                           .automatic_entries = p.automatic_entries});
  metrics.SetPrefixTierCounts({.device_bytes = p.bytes_used,
                               .device_entries = p.named_entries + p.automatic_entries,
                               .host_bytes = t.host_bytes,
                               .host_entries = t.host_entries,
                               .disk_bytes = t.disk_bytes,
                               .disk_entries = t.disk_entries,
                               .device_hits = p.named_hits + p.automatic_hits,
                               .host_hits = t.host_promotions,
                               .disk_hits = t.disk_loads,
                               .device_demotions = t.demotions,
                               .host_demotions = t.host_to_disk,
                               .drops = t.dropped + t.too_large,
                               .disk_load_failures = t.refused_files,
                               .disk_write_failures = t.disk_write_failures});
}

}  // namespace kvserve::server
