// PublishKvMetrics: the cache manager's statistics become the KV, session, prefix and tier
// metrics the engine exports after each step.
#include "server/kv_metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace kvserve::server {
namespace kv_metrics_test {

using ::testing::HasSubstr;

std::string Line(const std::string& line) { return "\n" + line + "\n"; }

cache::KvCacheManagerStats SomeStats() {
  cache::KvCacheManagerStats kv;
  kv.by_strategy["dynamic"] = {.device_bytes = 4096, .host_bytes = 0};
  kv.by_strategy["offloaded"] = {.device_bytes = 1024, .host_bytes = 8192};
  kv.budget_used = 5120;
  kv.budget_limit = 1 << 20;
  kv.sessions.live = 3;
  kv.sessions.offloaded = 1;
  kv.sessions.memory = {.device_bytes = 2048, .host_bytes = 512};
  kv.prefixes.automatic_hits = 5;
  kv.prefixes.bytes_used = 777;
  kv.tiers.host_bytes = 6000;
  return kv;
}

TEST(KvMetricsTest, LiveBytesAreLabelledByStrategyAndWhereTheyAre) {
  ServerMetrics metrics;
  PublishKvMetrics(SomeStats(), "cpu", &metrics);
  const std::string text = metrics.TextFormat();
  EXPECT_THAT(
      text,
      HasSubstr(Line("kvserve_kv_cache_bytes{location=\"device\",strategy=\"dynamic\"} 4096")));
  EXPECT_THAT(
      text,
      HasSubstr(Line("kvserve_kv_cache_bytes{location=\"device\",strategy=\"offloaded\"} 1024")));
  EXPECT_THAT(
      text,
      HasSubstr(Line("kvserve_kv_cache_bytes{location=\"host\",strategy=\"offloaded\"} 8192")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_kv_device_bytes_used 5120")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_kv_device_bytes_limit 1048576")));
}

TEST(KvMetricsTest, SessionsPrefixesAndTiersComeFromTheSameCall) {
  ServerMetrics metrics;
  PublishKvMetrics(SomeStats(), "cpu", &metrics);
  const std::string text = metrics.TextFormat();
  EXPECT_THAT(text, HasSubstr(Line("kvserve_sessions{state=\"live\"} 3")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_sessions{state=\"offloaded\"} 1")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_session_kv_bytes{location=\"device\"} 2048")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_prefix_cache_hits_total{kind=\"automatic\"} 5")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_prefix_cache_bytes 777")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_prefix_tier_bytes{tier=\"host\"} 6000")));
}

}  // namespace kv_metrics_test
}  // namespace kvserve::server
