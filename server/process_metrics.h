// ProcessMetrics: the process_* metrics every Prometheus client library exports (CPU time,
// memory, start time, file descriptors), read from /proc at each scrape.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

namespace kvserve::server {

// What /proc/self/stat says of the process, in the units the metrics use.
struct ProcessStat {
  double cpu_seconds = 0;  // user + system time of every thread
  int64_t virtual_bytes = 0;
  int64_t resident_bytes = 0;
  double start_time_seconds = 0;  // since the Unix epoch
};

// Parses the text of /proc/PID/stat (the command name in parentheses may hold spaces and
// parentheses): clock ticks are converted with `ticks_per_second`, resident pages with
// `page_bytes`, and the start time (ticks after boot) with `boot_time_seconds` (/proc/stat's
// btime). nullopt when the text is not such a line.
std::optional<ProcessStat> ParseProcessStat(std::string_view stat, int64_t ticks_per_second,
                                            int64_t page_bytes, double boot_time_seconds);

// Collects, at each call, process_cpu_seconds_total, process_resident_memory_bytes,
// process_virtual_memory_bytes, process_start_time_seconds, process_open_fds and
// process_max_fds, with the names and meanings of the Prometheus client libraries' process
// collectors. A figure that cannot be read (another OS, /proc not mounted) is left out.
// Thread-safe.
class ProcessMetrics final : public prometheus::Collectable {
 public:
  ProcessMetrics();
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const int64_t ticks_per_second_;
  const int64_t page_bytes_;
  const std::optional<double> boot_time_seconds_;  // /proc/stat's btime
};

}  // namespace kvserve::server
