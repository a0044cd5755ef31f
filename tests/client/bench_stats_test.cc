// Tests of the nearest-rank percentiles and latency summaries of kvctl bench.
#include "client/bench_stats.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace kvserve::client {
namespace {

TEST(NearestRankPercentileTest, EmptyHasNoPercentile) {
  EXPECT_FALSE(NearestRankPercentile({}, 50).has_value());
}

TEST(NearestRankPercentileTest, SingleValueIsEveryPercentile) {
  for (double p : {0.0, 1.0, 50.0, 99.0, 100.0}) {
    EXPECT_EQ(NearestRankPercentile({7.5}, p), 7.5) << p;
  }
}

TEST(NearestRankPercentileTest, HundredShuffledValues) {
  std::vector<double> values(100);
  std::iota(values.begin(), values.end(), 1.0);
  std::shuffle(values.begin(), values.end(), std::mt19937(3));
  EXPECT_EQ(NearestRankPercentile(values, 0), 1.0);
  EXPECT_EQ(NearestRankPercentile(values, 1), 1.0);
  EXPECT_EQ(NearestRankPercentile(values, 50), 50.0);
  EXPECT_EQ(NearestRankPercentile(values, 99), 99.0);
  EXPECT_EQ(NearestRankPercentile(values, 99.5), 100.0);
  EXPECT_EQ(NearestRankPercentile(values, 100), 100.0);
}

TEST(NearestRankPercentileTest, TenValuesRoundTheRankUp) {
  const std::vector<double> values = {10, 9, 8, 7, 6, 5, 4, 3, 2, 1};
  EXPECT_EQ(NearestRankPercentile(values, 50), 5.0);   // rank 5
  EXPECT_EQ(NearestRankPercentile(values, 51), 6.0);   // rank ceil(5.1) = 6
  EXPECT_EQ(NearestRankPercentile(values, 90), 9.0);   // rank 9
  EXPECT_EQ(NearestRankPercentile(values, 99), 10.0);  // rank ceil(9.9) = 10
}

TEST(NearestRankPercentileTest, OutOfRangePercentilesClamp) {
  const std::vector<double> values = {3, 1, 2};
  EXPECT_EQ(NearestRankPercentile(values, -5), 1.0);
  EXPECT_EQ(NearestRankPercentile(values, 150), 3.0);
}

TEST(SummarizeTest, PercentilesMeanAndCount) {
  const LatencySummary summary = Summarize({4, 1, 3, 2});
  EXPECT_EQ(summary.count, 4u);
  EXPECT_EQ(summary.p50, 2.0);
  EXPECT_EQ(summary.p99, 4.0);
  EXPECT_EQ(summary.mean, 2.5);
}

TEST(SummarizeTest, NoSamplesNoNumbers) {
  const LatencySummary summary = Summarize({});
  EXPECT_EQ(summary.count, 0u);
  EXPECT_FALSE(summary.p50.has_value());
  EXPECT_FALSE(summary.p99.has_value());
  EXPECT_FALSE(summary.mean.has_value());
}

}  // namespace
}  // namespace kvserve::client
