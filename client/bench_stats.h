// Latency statistics of kvctl bench: nearest-rank percentiles and a summary of samples.
#pragma once

#include <optional>
#include <vector>

namespace kvserve::client {

// The nearest-rank `percentile` (in [0, 100]) of `values`: the smallest value such that at
// least `percentile` percent of the values are <= it (the minimum for 0). nullopt when
// `values` is empty. `values` need not be sorted.
std::optional<double> NearestRankPercentile(std::vector<double> values, double percentile);

// p50, p99 and mean of a set of samples; all nullopt when there are none.
struct LatencySummary {
  std::optional<double> p50;
  std::optional<double> p99;
  std::optional<double> mean;
  size_t count = 0;
};

// Summarizes `values`.
LatencySummary Summarize(const std::vector<double>& values);

}  // namespace kvserve::client
