// Tests of ServerMetrics: each update shows up as the exact Prometheus text line; KV byte pairs
// that disappear read 0; prefix-store and session totals are added as increases only; tenant
// labels are bounded; request histograms reach the longest generation; process metrics.
#include "server/metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "server/prefix_metrics.h"

namespace kvserve::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A whole line of the text format (every sample line follows a newline and ends with one).
std::string Line(const std::string& line) { return "\n" + line + "\n"; }

TEST(MetricsTest, FreshRegistryExportsZeros) {
  ServerMetrics metrics;
  const std::string text = metrics.TextFormat();
  EXPECT_THAT(text, HasSubstr(Line("kvserve_num_requests_waiting 0")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_generation_tokens_total 0")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_oom_events_total 0")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_time_to_first_token_seconds_count 0")));
  // Labelled families have no samples until a label value is used.
  EXPECT_THAT(text, Not(HasSubstr("kvserve_requests_total{")));
  EXPECT_THAT(text, Not(HasSubstr("kvserve_kv_cache_bytes{")));
}

TEST(MetricsTest, RequestsAreCountedByOutcome) {
  ServerMetrics metrics;
  metrics.CountRequest("length");
  metrics.CountRequest("length");
  metrics.CountRequest("invalid_argument");
  const std::string text = metrics.TextFormat();
  EXPECT_THAT(text, HasSubstr(Line("kvserve_requests_total{outcome=\"length\"} 2")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_requests_total{outcome=\"invalid_argument\"} 1")));
  EXPECT_THAT(text, Not(HasSubstr("outcome=\"stop\"")));
}

TEST(MetricsTest, RpcsAreCountedByMethodAndCode) {
  ServerMetrics metrics;
  metrics.CountRpc("GetPrefix", "NOT_FOUND");
  metrics.CountRpc("GetPrefix", "NOT_FOUND");
  metrics.CountRpc("Tokenize", "OK");
  const std::string text = metrics.TextFormat();
  EXPECT_THAT(text,
              HasSubstr(Line("kvserve_rpcs_total{code=\"NOT_FOUND\",method=\"GetPrefix\"} 2")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_rpcs_total{code=\"OK\",method=\"Tokenize\"} 1")));
}

TEST(MetricsTest, EndToEndAndPrefillHistograms) {
  ServerMetrics metrics;
  EXPECT_THAT(metrics.TextFormat(), HasSubstr(Line("kvserve_e2e_request_latency_seconds_count 0")));
  metrics.ObserveEndToEndLatency(0.25);
  metrics.ObserveEndToEndLatency(2);
  metrics.ObservePrefillTime(0.004);
  const std::string text = metrics.TextFormat();
  EXPECT_THAT(text, HasSubstr(Line("kvserve_e2e_request_latency_seconds_count 2")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_e2e_request_latency_seconds_sum 2.25")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_e2e_request_latency_seconds_bucket{le=\"0.5\"} 1")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_request_prefill_time_seconds_count 1")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_request_prefill_time_seconds_bucket{le=\"0.005\"} 1")));
}

TEST(MetricsTest, KvDeviceBudgetIsUnlimitedUntilSet) {
  ServerMetrics metrics;
  EXPECT_THAT(metrics.TextFormat(), HasSubstr(Line("kvserve_kv_device_bytes_used 0")));
  EXPECT_THAT(metrics.TextFormat(), HasSubstr(Line("kvserve_kv_device_bytes_limit +Inf")));
  metrics.SetKvDeviceBudget(4096, 1 << 20);
  EXPECT_THAT(metrics.TextFormat(), HasSubstr(Line("kvserve_kv_device_bytes_used 4096")));
  EXPECT_THAT(metrics.TextFormat(), HasSubstr(Line("kvserve_kv_device_bytes_limit 1048576")));
  metrics.SetKvDeviceBudget(0, -1);
  EXPECT_THAT(metrics.TextFormat(), HasSubstr(Line("kvserve_kv_device_bytes_limit +Inf")));
}

TEST(MetricsTest, BuildInfoIsOneWithItsVersions) {
  ServerMetrics metrics;
  EXPECT_THAT(metrics.TextFormat(), Not(HasSubstr("kvserve_build_info{")));
  metrics.SetBuildInfo("0.1.0", "1.13.0", "none");
  EXPECT_THAT(
      metrics.TextFormat(),
      HasSubstr(Line("kvserve_build_info{cuda=\"none\",torch=\"1.13.0\",version=\"0.1.0\"} 1")));
}

TEST(MetricsTest, QueueGaugesTakeTheLatestValues) {
  ServerMetrics metrics;
  metrics.SetQueue(7, 2);
  metrics.SetQueue(3, 5);
  const std::string text = metrics.TextFormat();
  EXPECT_THAT(text, HasSubstr(Line("kvserve_num_requests_waiting 3")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_num_requests_running 5")));
}

TEST(MetricsTest, TokenCountersAccumulate) {
  ServerMetrics metrics;
  metrics.AddPromptTokens(10, 4);
  metrics.AddPromptTokens(12, 0);
  metrics.AddGeneratedTokens(7);
  metrics.AddGeneratedTokens(1);
  const std::string text = metrics.TextFormat();
  EXPECT_THAT(text, HasSubstr(Line("kvserve_prompt_tokens_total 22")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_prompt_tokens_cached_total 4")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_generation_tokens_total 8")));
}

TEST(MetricsTest, LatencyHistogramsCountSumAndBucket) {
  ServerMetrics metrics;
  metrics.ObserveTimeToFirstToken(0.25);
  metrics.ObserveInterTokenLatency(0.5);
  metrics.ObserveInterTokenLatency(2);
  metrics.ObserveQueueTime(0);
  const std::string text = metrics.TextFormat();
  EXPECT_THAT(text, HasSubstr(Line("kvserve_time_to_first_token_seconds_count 1")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_time_to_first_token_seconds_sum 0.25")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_time_to_first_token_seconds_bucket{le=\"0.1\"} 0")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_time_to_first_token_seconds_bucket{le=\"0.25\"} 1")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_time_to_first_token_seconds_bucket{le=\"+Inf\"} 1")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_inter_token_latency_seconds_count 2")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_inter_token_latency_seconds_sum 2.5")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_inter_token_latency_seconds_bucket{le=\"1\"} 1")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_inter_token_latency_seconds_bucket{le=\"2.5\"} 2")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_request_queue_time_seconds_count 1")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_request_queue_time_seconds_bucket{le=\"0.001\"} 1")));
}

// The finite upper bounds of histogram `name`'s buckets, in the order exported.
std::vector<double> BucketBounds(const std::string& text, const std::string& name) {
  std::vector<double> bounds;
  const std::string start = "\n" + name + "_bucket{le=\"";
  for (size_t at = text.find(start); at != std::string::npos; at = text.find(start, at + 1)) {
    const size_t value = at + start.size();
    const std::string bound = text.substr(value, text.find('"', value) - value);
    if (bound != "+Inf") bounds.push_back(std::stod(bound));
  }
  return bounds;
}

TEST(MetricsTest, RequestHistogramsReachTheLongestGenerationTheLimitAllows) {
  // 4,096 tokens at 30 tokens/s is 136.5 s: it falls in a finite bucket of every histogram a
  // whole generation can fill; the time between two tokens keeps its buckets.
  for (const auto& [limit, longest] : {std::pair<int64_t, double>{4096, 4096 / 30.0},
                                       std::pair<int64_t, double>{32768, 32768 / 30.0}}) {
    const std::string text = ServerMetrics(limit).TextFormat();
    for (const char* name :
         {"kvserve_e2e_request_latency_seconds", "kvserve_time_to_first_token_seconds",
          "kvserve_request_queue_time_seconds", "kvserve_request_prefill_time_seconds"}) {
      const std::vector<double> bounds = BucketBounds(text, name);
      ASSERT_FALSE(bounds.empty()) << name;
      EXPECT_GE(bounds.back(), longest) << name << " with limit " << limit;
      EXPECT_LT(bounds.back(), 2 * longest) << name << " with limit " << limit;
      EXPECT_TRUE(std::is_sorted(bounds.begin(), bounds.end())) << name;
    }
    const std::vector<double> itl = BucketBounds(text, "kvserve_inter_token_latency_seconds");
    ASSERT_FALSE(itl.empty());
    EXPECT_EQ(itl.back(), 60);
  }
  ServerMetrics metrics(4096);
  metrics.ObserveEndToEndLatency(136.5);
  EXPECT_THAT(metrics.TextFormat(),
              HasSubstr(Line("kvserve_e2e_request_latency_seconds_bucket{le=\"240\"} 1")));
}

TEST(MetricsTest, TenantRequestsAreCountedUnderKnownTenantsOnly) {
  ServerMetrics metrics;
  metrics.SetTenants({"search", "ads"});
  metrics.CountTenantRequest("search", "resource_exhausted");
  metrics.CountTenantRequest("search", "resource_exhausted");
  metrics.CountTenantRequest("default", "length");
  metrics.CountTenantRequest("cn-from-a-certificate", "resource_exhausted");
  metrics.CountTenantRequest("-", "unauthenticated");
  std::string text = metrics.TextFormat();
  EXPECT_THAT(text, HasSubstr(Line("kvserve_tenant_requests_total{outcome=\"resource_exhausted\","
                                   "tenant=\"search\"} 2")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_tenant_requests_total{outcome=\"length\","
                                   "tenant=\"default\"} 1")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_tenant_requests_total{outcome=\"resource_exhausted\","
                                   "tenant=\"(other)\"} 1")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_tenant_requests_total{outcome=\"unauthenticated\","
                                   "tenant=\"(other)\"} 1")));
  EXPECT_THAT(text, Not(HasSubstr("cn-from-a-certificate")));
  EXPECT_THAT(text, Not(HasSubstr("tenant=\"-\"")));
  // A reload that drops a tenant folds it from then on.
  metrics.SetTenants({"ads"});
  EXPECT_EQ(metrics.TenantLabel("search"), "(other)");
  EXPECT_EQ(metrics.TenantLabel("ads"), "ads");
  EXPECT_EQ(metrics.TenantLabel("default"), "default");
}

TEST(MetricsTest, TenantQueuesStartAtZeroFoldUnknownTenantsAndReadZeroWhenGone) {
  ServerMetrics metrics;
  metrics.SetTenants({"search"});
  std::string text = metrics.TextFormat();
  for (const char* tenant : {"default", "search", "(other)"}) {
    for (const char* name :
         {"kvserve_tenant_num_requests_waiting", "kvserve_tenant_num_requests_running"}) {
      EXPECT_THAT(text, HasSubstr(Line(std::string(name) + "{tenant=\"" + tenant + "\"} 0")));
    }
  }
  metrics.SetTenantQueues(
      {{"search", {.waiting = 3, .running = 1}}, {"x", {.waiting = 1}}, {"y", {.running = 2}}});
  text = metrics.TextFormat();
  EXPECT_THAT(text, HasSubstr(Line("kvserve_tenant_num_requests_waiting{tenant=\"search\"} 3")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_tenant_num_requests_running{tenant=\"search\"} 1")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_tenant_num_requests_waiting{tenant=\"(other)\"} 1")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_tenant_num_requests_running{tenant=\"(other)\"} 2")));
  EXPECT_THAT(text, Not(HasSubstr("tenant=\"x\"")));
  metrics.SetTenantQueues({{"default", {.running = 1}}});
  text = metrics.TextFormat();
  EXPECT_THAT(text, HasSubstr(Line("kvserve_tenant_num_requests_waiting{tenant=\"search\"} 0")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_tenant_num_requests_running{tenant=\"(other)\"} 0")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_tenant_num_requests_running{tenant=\"default\"} 1")));
}

TEST(MetricsTest, ProcessMetricsFollowTheRegistry) {
  const std::string text = ServerMetrics().TextFormat();
  for (const char* name : {"process_cpu_seconds_total", "process_resident_memory_bytes",
                           "process_start_time_seconds", "process_open_fds"}) {
    EXPECT_THAT(text, HasSubstr("\n" + std::string(name) + " ")) << name;
  }
  EXPECT_THAT(text, HasSubstr("# TYPE process_cpu_seconds_total counter"));
  EXPECT_THAT(text, HasSubstr("# TYPE process_resident_memory_bytes gauge"));
}

TEST(MetricsTest, OutOfMemoryAndOffloadFallbacksAreCounted) {
  ServerMetrics metrics;
  metrics.CountOutOfMemory();
  metrics.CountOutOfMemory();
  metrics.CountOutOfMemory();
  metrics.CountOffloadFallback();
  const std::string text = metrics.TextFormat();
  EXPECT_THAT(text, HasSubstr(Line("kvserve_oom_events_total 3")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_offload_fallbacks_total 1")));
}

TEST(MetricsTest, KvBytesPairsMissingFromALaterCallReadZero) {
  ServerMetrics metrics;
  metrics.SetKvBytes({{{"dynamic", "cpu"}, 4096}, {{"static", "host"}, 512}});
  std::string text = metrics.TextFormat();
  EXPECT_THAT(text,
              HasSubstr(Line("kvserve_kv_cache_bytes{location=\"device\",strategy=\"dynamic\"} "
                             "4096")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_kv_cache_bytes{location=\"host\",strategy=\"static\"} "
                                   "512")));

  metrics.SetKvBytes({{{"static", "host"}, 100}});
  text = metrics.TextFormat();
  EXPECT_THAT(
      text, HasSubstr(Line("kvserve_kv_cache_bytes{location=\"device\",strategy=\"dynamic\"} 0")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_kv_cache_bytes{location=\"host\",strategy=\"static\"} "
                                   "100")));

  metrics.SetKvBytes({});
  text = metrics.TextFormat();
  EXPECT_THAT(text, HasSubstr(Line("kvserve_kv_cache_bytes{location=\"host\",strategy=\"static\"} "
                                   "0")));
}

TEST(MetricsTest, KvBytesSayWhereTheyLiveAsSessionBytesDo) {
  // One label name and vocabulary for where K/V lives: every device's name is "device".
  ServerMetrics metrics;
  metrics.SetKvBytes({{{"dynamic", "cuda:0"}, 300}, {{"dynamic", "host"}, 20}});
  const std::string text = metrics.TextFormat();
  EXPECT_THAT(text,
              HasSubstr(Line("kvserve_kv_cache_bytes{location=\"device\",strategy=\"dynamic\"} "
                             "300")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_kv_cache_bytes{location=\"host\",strategy=\"dynamic\"} "
                                   "20")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_session_kv_bytes{location=\"device\"} 0")));
  EXPECT_THAT(text, Not(HasSubstr("device=\"")));
  EXPECT_THAT(text, Not(HasSubstr("cuda:0")));
}

TEST(MetricsTest, PrefixCountsAddOnlyTheIncreaseBetweenCalls) {
  ServerMetrics metrics;
  metrics.SetPrefixCounts({.named_hits = 2,
                           .named_misses = 1,
                           .automatic_hits = 5,
                           .automatic_misses = 5,
                           .evictions = 1,
                           .expirations = 1,
                           .bytes = 1000,
                           .named_entries = 2,
                           .automatic_entries = 3});
  std::string text = metrics.TextFormat();
  EXPECT_THAT(text, HasSubstr(Line("kvserve_prefix_cache_queries_total{kind=\"named\"} 3")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_prefix_cache_queries_total{kind=\"automatic\"} 10")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_prefix_cache_hits_total{kind=\"named\"} 2")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_prefix_cache_hits_total{kind=\"automatic\"} 5")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_prefix_cache_evictions_total 2")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_prefix_cache_bytes 1000")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_prefix_cache_entries{kind=\"named\"} 2")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_prefix_cache_entries{kind=\"automatic\"} 3")));

  // Cumulative totals again: only what is new since the first call is added.
  metrics.SetPrefixCounts({.named_hits = 3,
                           .named_misses = 1,
                           .automatic_hits = 5,
                           .automatic_misses = 7,
                           .evictions = 1,
                           .expirations = 2,
                           .bytes = 500,
                           .named_entries = 1,
                           .automatic_entries = 0});
  text = metrics.TextFormat();
  EXPECT_THAT(text, HasSubstr(Line("kvserve_prefix_cache_queries_total{kind=\"named\"} 4")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_prefix_cache_queries_total{kind=\"automatic\"} 12")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_prefix_cache_hits_total{kind=\"named\"} 3")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_prefix_cache_hits_total{kind=\"automatic\"} 5")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_prefix_cache_evictions_total 3")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_prefix_cache_bytes 500")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_prefix_cache_entries{kind=\"named\"} 1")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_prefix_cache_entries{kind=\"automatic\"} 0")));

  // The same totals once more add nothing; lower totals never make a counter go down.
  metrics.SetPrefixCounts({.named_hits = 3,
                           .named_misses = 1,
                           .automatic_hits = 5,
                           .automatic_misses = 7,
                           .evictions = 1,
                           .expirations = 2,
                           .bytes = 500,
                           .named_entries = 1});
  metrics.SetPrefixCounts({.named_hits = 1});
  text = metrics.TextFormat();
  EXPECT_THAT(text, HasSubstr(Line("kvserve_prefix_cache_queries_total{kind=\"named\"} 4")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_prefix_cache_hits_total{kind=\"named\"} 3")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_prefix_cache_evictions_total 3")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_prefix_cache_bytes 0")));
}

TEST(MetricsTest, PrefixTiersFromTheStoresAndTheTiersStats) {
  ServerMetrics metrics;
  // Every label reads 0 from the start.
  std::string text = metrics.TextFormat();
  EXPECT_THAT(text, HasSubstr(Line("kvserve_prefix_tier_bytes{tier=\"disk\"} 0")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_prefix_tier_demotions_total{from=\"host\"} 0")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_prefix_tier_disk_failures_total{op=\"load\"} 0")));
  cache::PrefixStoreStats store{.named_entries = 1,
                                .automatic_entries = 2,
                                .bytes_used = 3000,
                                .named_hits = 4,
                                .automatic_hits = 5};
  cache::SnapshotTiersStats tiers{.host_entries = 6,
                                  .host_bytes = 6000,
                                  .disk_entries = 7,
                                  .disk_bytes = 7000,
                                  .demotions = 8,
                                  .host_to_disk = 9,
                                  .disk_write_failures = 1,
                                  .too_large = 2,
                                  .host_promotions = 10,
                                  .disk_loads = 11,
                                  .dropped = 12,
                                  .refused_files = 13};
  PublishPrefixMetrics(store, tiers, metrics);
  text = metrics.TextFormat();
  EXPECT_THAT(text, HasSubstr(Line("kvserve_prefix_tier_bytes{tier=\"device\"} 3000")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_prefix_tier_bytes{tier=\"host\"} 6000")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_prefix_tier_bytes{tier=\"disk\"} 7000")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_prefix_tier_entries{tier=\"device\"} 3")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_prefix_tier_entries{tier=\"host\"} 6")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_prefix_tier_entries{tier=\"disk\"} 7")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_prefix_tier_hits_total{tier=\"device\"} 9")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_prefix_tier_hits_total{tier=\"host\"} 10")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_prefix_tier_hits_total{tier=\"disk\"} 11")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_prefix_tier_demotions_total{from=\"device\"} 8")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_prefix_tier_demotions_total{from=\"host\"} 9")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_prefix_tier_drops_total 14")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_prefix_tier_disk_failures_total{op=\"load\"} 13")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_prefix_tier_disk_failures_total{op=\"write\"} 1")));
  // The store's own families come from the same call.
  EXPECT_THAT(text, HasSubstr(Line("kvserve_prefix_cache_hits_total{kind=\"automatic\"} 5")));
  // Cumulative: a second call adds the increase only.
  tiers.host_promotions = 15;
  PublishPrefixMetrics(store, tiers, metrics);
  EXPECT_THAT(metrics.TextFormat(),
              HasSubstr(Line("kvserve_prefix_tier_hits_total{tier=\"host\"} 15")));
}

TEST(MetricsTest, SessionsHelpSaysLiveIncludesOffloaded) {
  const std::string text = ServerMetrics().TextFormat();
  EXPECT_THAT(text, HasSubstr("# HELP kvserve_sessions Open chat sessions: state=\"live\" counts "
                              "every open session, offloaded and evicted ones included;"));
}

TEST(MetricsTest, SessionFamiliesStartAtZeroForEveryLabel) {
  ServerMetrics metrics;
  const std::string text = metrics.TextFormat();
  EXPECT_THAT(text, HasSubstr(Line("kvserve_sessions{state=\"live\"} 0")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_sessions{state=\"offloaded\"} 0")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_session_kv_bytes{location=\"device\"} 0")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_session_kv_bytes{location=\"host\"} 0")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_session_evictions_total 0")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_session_expirations_total 0")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_session_turns_total{cache=\"hit\"} 0")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_session_turns_total{cache=\"miss\"} 0")));
}

TEST(MetricsTest, SessionGaugesTakeTheLatestValuesAndTotalsAddOnlyTheIncrease) {
  ServerMetrics metrics;
  metrics.SetSessionCounts({.live = 3,
                            .offloaded = 1,
                            .device_bytes = 4096,
                            .host_bytes = 1024,
                            .evictions = 2,
                            .expirations = 1,
                            .hits = 5,
                            .misses = 2});
  std::string text = metrics.TextFormat();
  EXPECT_THAT(text, HasSubstr(Line("kvserve_sessions{state=\"live\"} 3")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_sessions{state=\"offloaded\"} 1")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_session_kv_bytes{location=\"device\"} 4096")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_session_kv_bytes{location=\"host\"} 1024")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_session_evictions_total 2")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_session_expirations_total 1")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_session_turns_total{cache=\"hit\"} 5")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_session_turns_total{cache=\"miss\"} 2")));

  // Cumulative totals again: gauges are replaced, counters grow by what is new.
  metrics.SetSessionCounts({.live = 1,
                            .offloaded = 0,
                            .device_bytes = 0,
                            .host_bytes = 2048,
                            .evictions = 4,
                            .expirations = 3,
                            .hits = 6,
                            .misses = 2});
  text = metrics.TextFormat();
  EXPECT_THAT(text, HasSubstr(Line("kvserve_sessions{state=\"live\"} 1")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_sessions{state=\"offloaded\"} 0")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_session_kv_bytes{location=\"device\"} 0")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_session_kv_bytes{location=\"host\"} 2048")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_session_evictions_total 4")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_session_expirations_total 3")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_session_turns_total{cache=\"hit\"} 6")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_session_turns_total{cache=\"miss\"} 2")));

  // The same totals add nothing; lower totals never make a counter go down.
  metrics.SetSessionCounts(
      {.live = 1, .host_bytes = 2048, .evictions = 4, .expirations = 3, .hits = 6, .misses = 2});
  metrics.SetSessionCounts({.hits = 1});
  text = metrics.TextFormat();
  EXPECT_THAT(text, HasSubstr(Line("kvserve_sessions{state=\"live\"} 0")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_session_kv_bytes{location=\"host\"} 0")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_session_evictions_total 4")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_session_expirations_total 3")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_session_turns_total{cache=\"hit\"} 6")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_session_turns_total{cache=\"miss\"} 2")));
}

}  // namespace
}  // namespace kvserve::server

namespace kvserve::server {
namespace {

TEST(MetricsTest, VllmNamesFollowKvserveOnesOnceTheModelIsNamed) {
  ServerMetrics metrics;
  metrics.SetQueue(2, 1);
  metrics.AddPromptTokens(100, 64);
  metrics.SetKvDeviceBudget(250, 1000);
  EXPECT_THAT(metrics.TextFormat(), Not(HasSubstr("vllm:")));
  metrics.SetServedModelName("m");
  // The values so far, then every update.
  std::string text = metrics.TextFormat();
  EXPECT_THAT(text, HasSubstr("\nvllm:num_requests_waiting{model_name=\"m\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("\nvllm:num_requests_running{model_name=\"m\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("\nvllm:kv_cache_usage_perc{model_name=\"m\"} 0.25\n"));
  EXPECT_THAT(text, HasSubstr("\nvllm:gpu_cache_usage_perc{model_name=\"m\"} 0.25\n"));
  EXPECT_THAT(text, HasSubstr("\nvllm:prefix_cache_queries_total{model_name=\"m\"} 100\n"));
  EXPECT_THAT(text, HasSubstr("\nvllm:prefix_cache_hits_total{model_name=\"m\"} 64\n"));
  metrics.SetQueue(0, 3);
  metrics.AddPromptTokens(10, 0);
  metrics.SetKvDeviceBudget(10, -1);  // unlimited: no fraction
  text = metrics.TextFormat();
  EXPECT_THAT(text, HasSubstr("\nvllm:num_requests_running{model_name=\"m\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("\nvllm:prefix_cache_queries_total{model_name=\"m\"} 110\n"));
  EXPECT_THAT(text, HasSubstr("\nvllm:kv_cache_usage_perc{model_name=\"m\"} 0\n"));
  EXPECT_EQ(metrics.kv_cache_usage(), 0.0);
}

}  // namespace
}  // namespace kvserve::server
