// Latency statistics of kvctl bench (see bench_stats.h).
#include "client/bench_stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace kvserve::client {

std::optional<double> NearestRankPercentile(std::vector<double> values, double percentile) {
  if (values.empty()) return std::nullopt;
  const double n = static_cast<double>(values.size());
  // The 1-based rank ceil(p/100 * n); the epsilon keeps 99 * 100 / 100 from rounding up.
  const double exact = std::clamp(percentile, 0.0, 100.0) * n / 100.0;
  size_t rank = static_cast<size_t>(std::ceil(exact - 1e-9));
  rank = std::clamp<size_t>(rank, 1, values.size());
  std::nth_element(values.begin(), values.begin() + (rank - 1), values.end());
  return values[rank - 1];
}

LatencySummary Summarize(const std::vector<double>& values) {
  LatencySummary summary;
  summary.count = values.size();
  if (values.empty()) return summary;
  summary.p50 = NearestRankPercentile(values, 50);
  summary.p99 = NearestRankPercentile(values, 99);
  summary.mean = std::accumulate(values.begin(), values.end(), 0.0) / values.size();
  return summary;
}

}  // namespace kvserve::client
