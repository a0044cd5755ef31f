// ServerMetrics: Prometheus families and their updates.
#include "server/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "server/api_keys.h"
#include "server/process_metrics.h"

namespace kvserve::server {
namespace {

// Buckets in seconds between consecutive tokens: sub-millisecond decode steps on a GPU to a
// step stalled behind long CPU prefills.
const std::vector<double>& TokenLatencyBuckets() {
  static const std::vector<double> buckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                              0.5,   1.0,    2.5,   5.0,  10.0,  30.0, 60.0};
  return buckets;
}

// Buckets in seconds of what may last a whole generation (queue, first token, the request):
// those between tokens, then doubling until the longest generation `max_new_tokens_limit`
// allows at ServerMetrics::kSlowestTokensPerSecond falls in a finite bucket.
std::vector<double> RequestLatencyBuckets(int64_t max_new_tokens_limit) {
  std::vector<double> buckets = TokenLatencyBuckets();
  const double longest = static_cast<double>(std::max<int64_t>(max_new_tokens_limit, 1)) /
                         ServerMetrics::kSlowestTokensPerSecond;
  while (buckets.back() < longest) buckets.push_back(buckets.back() * 2);
  return buckets;
}

}  // namespace

struct ServerMetrics::VllmSeries {
  prometheus::Gauge* waiting;
  prometheus::Gauge* running;
  prometheus::Gauge* kv_usage;
  prometheus::Gauge* gpu_usage;
  prometheus::Counter* queries;
  prometheus::Counter* hits;
};

ServerMetrics::ServerMetrics(int64_t max_new_tokens_limit)
    : registry_(std::make_shared<prometheus::Registry>()),
      process_(std::make_unique<ProcessMetrics>()) {
  const std::vector<double> request_buckets = RequestLatencyBuckets(max_new_tokens_limit);
  requests_ = &prometheus::BuildCounter()
                   .Name("kvserve_requests_total")
                   .Help(
                       "Generation requests that ended, refused ones included, by outcome "
                       "(finish reason or error code)")
                   .Register(*registry_);
  tenant_requests_ = &prometheus::BuildCounter()
                          .Name("kvserve_tenant_requests_total")
                          .Help(
                              "kvserve_requests_total by the caller's tenant (tenants the keys "
                              "file does not name: \"(other)\")")
                          .Register(*registry_);
  tenant_waiting_ = &prometheus::BuildGauge()
                         .Name("kvserve_tenant_num_requests_waiting")
                         .Help("kvserve_num_requests_waiting by tenant")
                         .Register(*registry_);
  tenant_running_ = &prometheus::BuildGauge()
                         .Name("kvserve_tenant_num_requests_running")
                         .Help("kvserve_num_requests_running by tenant")
                         .Register(*registry_);
  rpcs_ = &prometheus::BuildCounter()
               .Name("kvserve_rpcs_total")
               .Help("Calls of kvserve's services, by method and gRPC status code")
               .Register(*registry_);
  e2e_latency_ = &prometheus::BuildHistogram()
                      .Name("kvserve_e2e_request_latency_seconds")
                      .Help("Finished generation requests, from the call's start to its status")
                      .Register(*registry_)
                      .Add({}, request_buckets);
  prefill_time_ = &prometheus::BuildHistogram()
                       .Name("kvserve_request_prefill_time_seconds")
                       .Help("From admission into the running batch to the first token")
                       .Register(*registry_)
                       .Add({}, request_buckets);
  kv_device_used_ = &prometheus::BuildGauge()
                         .Name("kvserve_kv_device_bytes_used")
                         .Help(
                             "Device bytes counted against the KV budget (live caches, prefix "
                             "snapshots, idle sessions)")
                         .Register(*registry_)
                         .Add({});
  kv_device_limit_ = &prometheus::BuildGauge()
                          .Name("kvserve_kv_device_bytes_limit")
                          .Help("The KV device budget in bytes (+Inf: unlimited)")
                          .Register(*registry_)
                          .Add({});
  kv_device_limit_->Set(std::numeric_limits<double>::infinity());
  build_info_ = &prometheus::BuildGauge()
                     .Name("kvserve_build_info")
                     .Help("1, labelled with the kvserve, LibTorch and CUDA versions")
                     .Register(*registry_);
  waiting_ = &prometheus::BuildGauge()
                  .Name("kvserve_num_requests_waiting")
                  .Help("Requests queued for admission")
                  .Register(*registry_)
                  .Add({});
  running_ = &prometheus::BuildGauge()
                  .Name("kvserve_num_requests_running")
                  .Help("Requests in the running batch")
                  .Register(*registry_)
                  .Add({});
  prompt_tokens_ = &prometheus::BuildCounter()
                        .Name("kvserve_prompt_tokens_total")
                        .Help("Prompt tokens of admitted requests")
                        .Register(*registry_)
                        .Add({});
  cached_tokens_ = &prometheus::BuildCounter()
                        .Name("kvserve_prompt_tokens_cached_total")
                        .Help("Prompt tokens copied from a cached prefix instead of computed")
                        .Register(*registry_)
                        .Add({});
  generated_tokens_ = &prometheus::BuildCounter()
                           .Name("kvserve_generation_tokens_total")
                           .Help("Tokens generated")
                           .Register(*registry_)
                           .Add({});
  forced_tokens_ = &prometheus::BuildCounter()
                        .Name("kvserve_constraint_forced_tokens_total")
                        .Help(
                            "Tokens an output constraint appended without sampling them "
                            "(jump-forward), computed with the next step")
                        .Register(*registry_)
                        .Add({});
  ttft_ = &prometheus::BuildHistogram()
               .Name("kvserve_time_to_first_token_seconds")
               .Help("From arrival to the first generated token")
               .Register(*registry_)
               .Add({}, request_buckets);
  itl_ = &prometheus::BuildHistogram()
              .Name("kvserve_inter_token_latency_seconds")
              .Help("Between consecutive generated tokens of a request")
              .Register(*registry_)
              .Add({}, TokenLatencyBuckets());
  queue_time_ = &prometheus::BuildHistogram()
                     .Name("kvserve_request_queue_time_seconds")
                     .Help("From arrival to admission into the running batch")
                     .Register(*registry_)
                     .Add({}, request_buckets);
  kv_bytes_ = &prometheus::BuildGauge()
                   .Name("kvserve_kv_cache_bytes")
                   .Help(
                       "Bytes held by the KV caches of live requests, by strategy and location "
                       "(device, host)")
                   .Register(*registry_);
  oom_events_ = &prometheus::BuildCounter()
                     .Name("kvserve_oom_events_total")
                     .Help(
                         "Device out-of-memory errors caught during steps (each step is "
                         "rolled back and retried)")
                     .Register(*registry_)
                     .Add({});
  offload_fallbacks_ = &prometheus::BuildCounter()
                            .Name("kvserve_offload_fallbacks_total")
                            .Help(
                                "Request caches moved to their offloaded form after an "
                                "out-of-memory error")
                            .Register(*registry_)
                            .Add({});
  prefix_queries_ = &prometheus::BuildCounter()
                         .Name("kvserve_prefix_cache_queries_total")
                         .Help(
                             "Prefix-cache lookups, by kind (named: a request named a prefix; "
                             "automatic: a prompt was looked up)")
                         .Register(*registry_);
  prefix_hits_ = &prometheus::BuildCounter()
                      .Name("kvserve_prefix_cache_hits_total")
                      .Help("Prefix-cache lookups that found a snapshot, by kind")
                      .Register(*registry_);
  prefix_evictions_ = &prometheus::BuildCounter()
                           .Name("kvserve_prefix_cache_evictions_total")
                           .Help("Prefix snapshots dropped for room or by TTL")
                           .Register(*registry_)
                           .Add({});
  prefix_bytes_ = &prometheus::BuildGauge()
                       .Name("kvserve_prefix_cache_bytes")
                       .Help("Bytes of prefix snapshots held")
                       .Register(*registry_)
                       .Add({});
  prefix_entries_ = &prometheus::BuildGauge()
                         .Name("kvserve_prefix_cache_entries")
                         .Help("Prefix snapshots held, by kind")
                         .Register(*registry_);
  tier_bytes_ = &prometheus::BuildGauge()
                     .Name("kvserve_prefix_tier_bytes")
                     .Help("Bytes of prefix snapshots held, by tier (device, host, disk)")
                     .Register(*registry_);
  tier_entries_ = &prometheus::BuildGauge()
                       .Name("kvserve_prefix_tier_entries")
                       .Help("Prefix snapshots held, by tier (device, host, disk)")
                       .Register(*registry_);
  tier_hits_ = &prometheus::BuildCounter()
                    .Name("kvserve_prefix_tier_hits_total")
                    .Help(
                        "Prefix snapshots used, by tier (device: a lookup used a snapshot of "
                        "the device store, promoted ones included; host, disk: a snapshot "
                        "promoted from that tier first)")
                    .Register(*registry_);
  tier_demotions_ = &prometheus::BuildCounter()
                         .Name("kvserve_prefix_tier_demotions_total")
                         .Help(
                             "Prefix snapshots moved to a lower tier, by the tier they left "
                             "(device: to host or disk; host: to disk)")
                         .Register(*registry_);
  tier_drops_ =
      &prometheus::BuildCounter()
           .Name("kvserve_prefix_tier_drops_total")
           .Help("Demoted prefix snapshots dropped (they left the last tier or fit in none)")
           .Register(*registry_)
           .Add({});
  tier_disk_failures_ = &prometheus::BuildCounter()
                             .Name("kvserve_prefix_tier_disk_failures_total")
                             .Help(
                                 "Prefix snapshot files that failed, by op (load: refused as "
                                 "corrupt, truncated or foreign and removed; write)")
                             .Register(*registry_);
  for (const char* tier : {"device", "host", "disk"}) {
    tier_bytes_->Add({{"tier", tier}});
    tier_entries_->Add({{"tier", tier}});
    tier_hits_->Add({{"tier", tier}});
  }
  for (const char* from : {"device", "host"}) tier_demotions_->Add({{"from", from}});
  for (const char* op : {"load", "write"}) tier_disk_failures_->Add({{"op", op}});
  sessions_ = &prometheus::BuildGauge()
                   .Name("kvserve_sessions")
                   .Help(
                       "Open chat sessions: state=\"live\" counts every open session, offloaded "
                       "and evicted ones included; state=\"offloaded\" counts those of them whose "
                       "idle cache is in host memory (a subset: do not add the states)")
                   .Register(*registry_);
  session_bytes_ = &prometheus::BuildGauge()
                        .Name("kvserve_session_kv_bytes")
                        .Help("Bytes of idle sessions' KV caches, by location (device, host)")
                        .Register(*registry_);
  session_evictions_ = &prometheus::BuildCounter()
                            .Name("kvserve_session_evictions_total")
                            .Help(
                                "Session caches evicted (--session-cache-bytes or memory "
                                "pressure); the session stays open and recomputes")
                            .Register(*registry_)
                            .Add({});
  session_expirations_ = &prometheus::BuildCounter()
                              .Name("kvserve_session_expirations_total")
                              .Help("Sessions closed by their TTL")
                              .Register(*registry_)
                              .Add({});
  session_turns_ = &prometheus::BuildCounter()
                        .Name("kvserve_session_turns_total")
                        .Help(
                            "Session turns after the first, by cache (hit: reused the "
                            "session's cache; miss: computed the prompt)")
                        .Register(*registry_);
  for (const char* state : {"live", "offloaded"}) sessions_->Add({{"state", state}});
  for (const char* location : {"device", "host"}) session_bytes_->Add({{"location", location}});
  for (const char* cache : {"hit", "miss"}) session_turns_->Add({{"cache", cache}});
  SetTenants({});
}

void ServerMetrics::SetSessionCounts(const SessionCounts& c) {
  absl::MutexLock lock(&mu_);
  const SessionCounts& last = last_session_counts_;
  auto add = [](prometheus::Counter& counter, int64_t now, int64_t before) {
    if (now > before) counter.Increment(static_cast<double>(now - before));
  };
  sessions_->Add({{"state", "live"}}).Set(static_cast<double>(c.live));
  sessions_->Add({{"state", "offloaded"}}).Set(static_cast<double>(c.offloaded));
  session_bytes_->Add({{"location", "device"}}).Set(static_cast<double>(c.device_bytes));
  session_bytes_->Add({{"location", "host"}}).Set(static_cast<double>(c.host_bytes));
  add(*session_evictions_, c.evictions, last.evictions);
  add(*session_expirations_, c.expirations, last.expirations);
  add(session_turns_->Add({{"cache", "hit"}}), c.hits, last.hits);
  add(session_turns_->Add({{"cache", "miss"}}), c.misses, last.misses);
  last_session_counts_ = c;
}

ServerMetrics::~ServerMetrics() = default;

void ServerMetrics::SetPrefixCounts(const PrefixCounts& c) {
  absl::MutexLock lock(&mu_);
  const PrefixCounts& last = last_prefix_counts_;
  auto add = [](prometheus::Counter& counter, int64_t now, int64_t before) {
    if (now > before) counter.Increment(static_cast<double>(now - before));
  };
  add(prefix_queries_->Add({{"kind", "named"}}), c.named_hits + c.named_misses,
      last.named_hits + last.named_misses);
  add(prefix_queries_->Add({{"kind", "automatic"}}), c.automatic_hits + c.automatic_misses,
      last.automatic_hits + last.automatic_misses);
  add(prefix_hits_->Add({{"kind", "named"}}), c.named_hits, last.named_hits);
  add(prefix_hits_->Add({{"kind", "automatic"}}), c.automatic_hits, last.automatic_hits);
  add(*prefix_evictions_, c.evictions + c.expirations, last.evictions + last.expirations);
  prefix_bytes_->Set(static_cast<double>(c.bytes));
  prefix_entries_->Add({{"kind", "named"}}).Set(static_cast<double>(c.named_entries));
  prefix_entries_->Add({{"kind", "automatic"}}).Set(static_cast<double>(c.automatic_entries));
  last_prefix_counts_ = c;
}

void ServerMetrics::SetPrefixTierCounts(const PrefixTierCounts& c) {
  absl::MutexLock lock(&mu_);
  const PrefixTierCounts& last = last_tier_counts_;
  auto add = [](prometheus::Counter& counter, int64_t now, int64_t before) {
    if (now > before) counter.Increment(static_cast<double>(now - before));
  };
  const struct {
    const char* tier;
    int64_t bytes, entries, hits, last_hits;
  } tiers[] = {{"device", c.device_bytes, c.device_entries, c.device_hits, last.device_hits},
               {"host", c.host_bytes, c.host_entries, c.host_hits, last.host_hits},
               {"disk", c.disk_bytes, c.disk_entries, c.disk_hits, last.disk_hits}};
  for (const auto& t : tiers) {
    tier_bytes_->Add({{"tier", t.tier}}).Set(static_cast<double>(t.bytes));
    tier_entries_->Add({{"tier", t.tier}}).Set(static_cast<double>(t.entries));
    add(tier_hits_->Add({{"tier", t.tier}}), t.hits, t.last_hits);
  }
  add(tier_demotions_->Add({{"from", "device"}}), c.device_demotions, last.device_demotions);
  add(tier_demotions_->Add({{"from", "host"}}), c.host_demotions, last.host_demotions);
  add(*tier_drops_, c.drops, last.drops);
  add(tier_disk_failures_->Add({{"op", "load"}}), c.disk_load_failures, last.disk_load_failures);
  add(tier_disk_failures_->Add({{"op", "write"}}), c.disk_write_failures, last.disk_write_failures);
  last_tier_counts_ = c;
}

void ServerMetrics::CountRequest(const std::string& outcome) {
  requests_->Add({{"outcome", outcome}}).Increment();
}

void ServerMetrics::CountTenantRequest(const std::string& tenant, const std::string& outcome) {
  tenant_requests_->Add({{"tenant", TenantLabel(tenant)}, {"outcome", outcome}}).Increment();
}

void ServerMetrics::SetTenants(const std::vector<std::string>& tenants) {
  absl::MutexLock lock(&mu_);
  tenants_ = {tenants.begin(), tenants.end()};
  tenants_.insert(kDefaultTenant);
  // Every label value shows in the queue gauges from the start, at 0.
  std::vector<std::string> labels(tenants_.begin(), tenants_.end());
  labels.push_back(kOtherTenant);
  for (const std::string& label : labels) {
    if (tenant_queue_labels_.insert(label).second) {
      tenant_waiting_->Add({{"tenant", label}});
      tenant_running_->Add({{"tenant", label}});
    }
  }
}

std::string ServerMetrics::TenantLabel(const std::string& tenant) const {
  absl::MutexLock lock(&mu_);
  return tenants_.contains(tenant) ? tenant : kOtherTenant;
}

void ServerMetrics::SetTenantQueues(const std::map<std::string, TenantQueue>& by_tenant) {
  std::map<std::string, TenantQueue> by_label;
  for (const auto& [tenant, queue] : by_tenant) {
    TenantQueue& sum = by_label[TenantLabel(tenant)];
    sum.waiting += queue.waiting;
    sum.running += queue.running;
  }
  absl::MutexLock lock(&mu_);
  for (const auto& [label, queue] : by_label) tenant_queue_labels_.insert(label);
  for (const std::string& label : tenant_queue_labels_) {
    const auto it = by_label.find(label);
    const TenantQueue queue = it == by_label.end() ? TenantQueue() : it->second;
    tenant_waiting_->Add({{"tenant", label}}).Set(static_cast<double>(queue.waiting));
    tenant_running_->Add({{"tenant", label}}).Set(static_cast<double>(queue.running));
  }
}

void ServerMetrics::CountRpc(const std::string& method, const std::string& code) {
  rpcs_->Add({{"method", method}, {"code", code}}).Increment();
}

void ServerMetrics::ObserveEndToEndLatency(double seconds) { e2e_latency_->Observe(seconds); }
void ServerMetrics::ObservePrefillTime(double seconds) { prefill_time_->Observe(seconds); }

void ServerMetrics::SetKvDeviceBudget(int64_t used_bytes, int64_t limit_bytes) {
  kv_device_used_->Set(static_cast<double>(used_bytes));
  kv_device_limit_->Set(limit_bytes < 0 ? std::numeric_limits<double>::infinity()
                                        : static_cast<double>(limit_bytes));
  const double usage =
      limit_bytes <= 0
          ? 0.0
          : std::clamp(static_cast<double>(used_bytes) / static_cast<double>(limit_bytes), 0.0,
                       1.0);
  absl::MutexLock lock(&mu_);
  kv_cache_usage_ = usage;
  if (vllm_ != nullptr) {
    vllm_->kv_usage->Set(usage);
    vllm_->gpu_usage->Set(usage);
  }
}

double ServerMetrics::kv_cache_usage() const {
  absl::MutexLock lock(&mu_);
  return kv_cache_usage_;
}

void ServerMetrics::SetServedModelName(const std::string& name) {
  const prometheus::Labels labels = {{"model_name", name}};
  auto gauge = [&](const char* metric, const char* help) {
    return &prometheus::BuildGauge().Name(metric).Help(help).Register(*registry_).Add(labels);
  };
  auto counter = [&](const char* metric, const char* help) {
    return &prometheus::BuildCounter().Name(metric).Help(help).Register(*registry_).Add(labels);
  };
  auto series = std::make_unique<VllmSeries>(VllmSeries{
      .waiting =
          gauge("vllm:num_requests_waiting", "Requests waiting (kvserve_num_requests_waiting)"),
      .running =
          gauge("vllm:num_requests_running", "Requests running (kvserve_num_requests_running)"),
      .kv_usage = gauge("vllm:kv_cache_usage_perc",
                        "Fraction of the KV device budget in use, 0 to 1 (0: no budget)"),
      .gpu_usage = gauge("vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc's older name"),
      .queries =
          counter("vllm:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache"),
      .hits = counter("vllm:prefix_cache_hits_total",
                      "Prompt tokens found in the prefix cache (copied, not computed)")});
  absl::MutexLock lock(&mu_);
  if (vllm_ != nullptr) return;
  series->waiting->Set(waiting_->Value());
  series->running->Set(running_->Value());
  series->kv_usage->Set(kv_cache_usage_);
  series->gpu_usage->Set(kv_cache_usage_);
  series->queries->Increment(prompt_tokens_->Value());
  series->hits->Increment(cached_tokens_->Value());
  vllm_ = std::move(series);
}

void ServerMetrics::SetBuildInfo(const std::string& version, const std::string& torch,
                                 const std::string& cuda) {
  build_info_->Add({{"version", version}, {"torch", torch}, {"cuda", cuda}}).Set(1);
}

void ServerMetrics::CountOutOfMemory() { oom_events_->Increment(); }
void ServerMetrics::CountOffloadFallback() { offload_fallbacks_->Increment(); }

void ServerMetrics::SetQueue(int64_t num_waiting, int64_t num_running) {
  absl::MutexLock lock(&mu_);
  waiting_->Set(static_cast<double>(num_waiting));
  running_->Set(static_cast<double>(num_running));
  if (vllm_ != nullptr) {
    vllm_->waiting->Set(static_cast<double>(num_waiting));
    vllm_->running->Set(static_cast<double>(num_running));
  }
}

void ServerMetrics::AddPromptTokens(int64_t num_prompt_tokens, int64_t num_cached_tokens) {
  absl::MutexLock lock(&mu_);
  prompt_tokens_->Increment(static_cast<double>(num_prompt_tokens));
  cached_tokens_->Increment(static_cast<double>(num_cached_tokens));
  if (vllm_ != nullptr) {
    vllm_->queries->Increment(static_cast<double>(num_prompt_tokens));
    vllm_->hits->Increment(static_cast<double>(num_cached_tokens));
  }
}

void ServerMetrics::AddGeneratedTokens(int64_t num_tokens) {
  generated_tokens_->Increment(static_cast<double>(num_tokens));
}

int64_t ServerMetrics::generated_tokens() const {
  return static_cast<int64_t>(generated_tokens_->Value());
}

void ServerMetrics::AddForcedTokens(int64_t num_tokens) {
  forced_tokens_->Increment(static_cast<double>(num_tokens));
}

int64_t ServerMetrics::forced_tokens() const {
  return static_cast<int64_t>(forced_tokens_->Value());
}

void ServerMetrics::ObserveTimeToFirstToken(double seconds) { ttft_->Observe(seconds); }
void ServerMetrics::ObserveInterTokenLatency(double seconds) { itl_->Observe(seconds); }
void ServerMetrics::ObserveQueueTime(double seconds) { queue_time_->Observe(seconds); }

void ServerMetrics::SetKvBytes(
    const std::map<std::pair<std::string, std::string>, int64_t>& bytes) {
  // By (strategy, location): every device name is location "device".
  std::map<std::pair<std::string, std::string>, int64_t> by_location;
  for (const auto& [key, value] : bytes) {
    by_location[{key.first, key.second == "host" ? "host" : "device"}] += value;
  }
  absl::MutexLock lock(&mu_);
  for (const auto& [key, value] : by_location) {
    auto it = kv_gauges_.find(key);
    if (it == kv_gauges_.end()) {
      prometheus::Gauge* gauge =
          &kv_bytes_->Add({{"strategy", key.first}, {"location", key.second}});
      it = kv_gauges_.emplace(key, gauge).first;
    }
  }
  for (const auto& [key, gauge] : kv_gauges_) {
    auto value = by_location.find(key);
    gauge->Set(value == by_location.end() ? 0.0 : static_cast<double>(value->second));
  }
}

std::string ServerMetrics::TextFormat() const {
  std::vector<prometheus::MetricFamily> families = registry_->Collect();
  std::vector<prometheus::MetricFamily> process = process_->Collect();
  families.insert(families.end(), std::make_move_iterator(process.begin()),
                  std::make_move_iterator(process.end()));
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace kvserve::server
