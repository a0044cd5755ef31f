// ServerMetrics: the server's Prometheus metrics (names follow what vLLM users know, with a
// kvserve_ prefix), kept in one registry that --metrics-listen serves.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace prometheus {
class Counter;
class Gauge;
class Histogram;
class Registry;
template <typename T>
class Family;
}  // namespace prometheus

namespace kvserve::server {

class ProcessMetrics;

// Thread-safe: every method may be called from any thread.
class ServerMetrics {
 public:
  // The tenant label of every tenant the keys file does not name (and of unauthenticated
  // calls): not a valid tenant name, so it never mixes with one.
  static constexpr char kOtherTenant[] = "(other)";
  // The slowest decode the latency histograms plan for: their buckets reach the longest
  // generation `max_new_tokens_limit` allows at this rate.
  static constexpr double kSlowestTokensPerSecond = 30;

  // `max_new_tokens_limit` is --max-new-tokens-limit (see kSlowestTokensPerSecond).
  explicit ServerMetrics(int64_t max_new_tokens_limit = 4096);
  ~ServerMetrics();

  // The registry (to add collectables of other modules).
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

  // kvserve_requests_total{outcome}: one per generation request (Generate, GenerateStream)
  // that ended, refused ones included. Outcomes: "length", "stop", "eos", "cancelled" (finish
  // reasons), and for failures the lower-case gRPC code name ("invalid_argument",
  // "not_found", "resource_exhausted", "deadline_exceeded", ...).
  void CountRequest(const std::string& outcome);
  // kvserve_tenant_requests_total{tenant,outcome}: kvserve_requests_total by the caller's
  // tenant (TenantLabel), so that refusals (the error outcomes) show whom they hit.
  void CountTenantRequest(const std::string& tenant, const std::string& outcome);
  // The tenants that get a label value of their own: these and "default" (the --api-keys-file's
  // tenants; again after each reload). Every other tenant is counted as kOtherTenant, which
  // bounds the labels' cardinality whatever names client certificates carry.
  void SetTenants(const std::vector<std::string>& tenants);
  // `tenant`'s label value: itself when SetTenants named it (or it is "default"), else
  // kOtherTenant.
  std::string TenantLabel(const std::string& tenant) const;
  // kvserve_tenant_num_requests_waiting{tenant} and kvserve_tenant_num_requests_running{tenant}:
  // the engine's requests by tenant (TenantLabel; tenants folded into one label are summed).
  // Every label value known (SetTenants) or set once stays exported; one missing from
  // `by_tenant` reads 0.
  struct TenantQueue {
    int64_t waiting = 0;
    int64_t running = 0;
  };
  void SetTenantQueues(const std::map<std::string, TenantQueue>& by_tenant);
  // kvserve_rpcs_total{method,code}: one per call of a kvserve service, by method
  // ("Generate", "RegisterPrefix", ...) and gRPC status code name ("OK", "NOT_FOUND", ...).
  void CountRpc(const std::string& method, const std::string& code);
  // kvserve_e2e_request_latency_seconds: a finished generation request, from the call's
  // start to its status; kvserve_request_prefill_time_seconds: from its admission to its
  // first token.
  void ObserveEndToEndLatency(double seconds);
  void ObservePrefillTime(double seconds);
  // kvserve_kv_device_bytes_used and kvserve_kv_device_bytes_limit: the device bytes counted
  // against the KV budget (live caches, prefix snapshots, idle sessions) and the budget
  // (--kv-device-bytes; +Inf when `limit_bytes` < 0, unlimited).
  void SetKvDeviceBudget(int64_t used_bytes, int64_t limit_bytes);
  // kvserve_build_info{version,torch,cuda} = 1 ("none" for cuda without CUDA). Call once.
  void SetBuildInfo(const std::string& version, const std::string& torch, const std::string& cuda);
  // kvserve_num_requests_waiting / kvserve_num_requests_running.
  void SetQueue(int64_t num_waiting, int64_t num_running);
  // kvserve_prompt_tokens_total and kvserve_prompt_tokens_cached_total (of those, copied
  // from a cached prefix).
  void AddPromptTokens(int64_t num_prompt_tokens, int64_t num_cached_tokens);
  // kvserve_generation_tokens_total: tokens sampled, over every row of a request (each beam
  // and each sample counts).
  void AddGeneratedTokens(int64_t num_tokens);
  // Its value so far (benchmarks).
  int64_t generated_tokens() const;
  // Tokens an output constraint appended without sampling (jump-forward).
  void AddForcedTokens(int64_t num_tokens);
  int64_t forced_tokens() const;
  // kvserve_time_to_first_token_seconds, kvserve_inter_token_latency_seconds,
  // kvserve_request_queue_time_seconds.
  void ObserveTimeToFirstToken(double seconds);
  void ObserveInterTokenLatency(double seconds);
  void ObserveQueueTime(double seconds);
  // kvserve_oom_events_total: out-of-memory errors caught (each rolls a step back);
  // kvserve_offload_fallbacks_total: request caches moved to their offloaded form.
  void CountOutOfMemory();
  void CountOffloadFallback();
  // kvserve_kv_cache_bytes{strategy, location}: bytes the live caches hold, by (strategy, where):
  // `where` is "host" for host memory, else the device's name ("cpu", "cuda:0"), exported as
  // location="device" (the vocabulary of kvserve_session_kv_bytes). Every (strategy, location)
  // pair set once stays exported; pairs missing from `bytes` are set to 0.
  void SetKvBytes(const std::map<std::pair<std::string, std::string>, int64_t>& bytes);

  // The prefix store's counts: kvserve_prefix_cache_queries_total{kind} and
  // kvserve_prefix_cache_hits_total{kind} (kind: named, automatic),
  // kvserve_prefix_cache_evictions_total, kvserve_prefix_cache_bytes,
  // kvserve_prefix_cache_entries{kind}. Takes the store's cumulative totals and adds what is
  // new since the previous call.
  struct PrefixCounts {
    int64_t named_hits = 0, named_misses = 0, automatic_hits = 0, automatic_misses = 0;
    int64_t evictions = 0, expirations = 0, bytes = 0, named_entries = 0, automatic_entries = 0;
  };
  void SetPrefixCounts(const PrefixCounts& counts);

  // The tiers of prefix snapshots (device: the prefix store; host and disk: where it demotes
  // to, cache/snapshot_tiers.h): kvserve_prefix_tier_bytes{tier} and
  // kvserve_prefix_tier_entries{tier} (tier: device, host, disk),
  // kvserve_prefix_tier_hits_total{tier} (device: lookups that used a snapshot of the device
  // store, promoted ones included; host, disk: promotions served from that tier),
  // kvserve_prefix_tier_demotions_total{from} (device: evicted snapshots a lower tier kept; host:
  // host entries moved to disk), kvserve_prefix_tier_drops_total (entries that left the last tier,
  // or fit in none), kvserve_prefix_tier_disk_failures_total{op} (load: files refused as corrupt,
  // truncated or foreign, at start or on a promotion; write: files that could not be written).
  // Cumulative totals, as SetPrefixCounts.
  struct PrefixTierCounts {
    int64_t device_bytes = 0, device_entries = 0, host_bytes = 0, host_entries = 0;
    int64_t disk_bytes = 0, disk_entries = 0;
    int64_t device_hits = 0, host_hits = 0, disk_hits = 0;
    int64_t device_demotions = 0, host_demotions = 0, drops = 0;
    int64_t disk_load_failures = 0, disk_write_failures = 0;
  };
  void SetPrefixTierCounts(const PrefixTierCounts& counts);

  // Sessions: kvserve_sessions{state} (live: every open session, offloaded ones included;
  // offloaded: those of them whose idle cache is in host memory),
  // kvserve_session_kv_bytes{location} (idle sessions' caches: device, host),
  // kvserve_session_evictions_total, kvserve_session_expirations_total,
  // kvserve_session_turns_total{cache} (hit: reused the session's cache; miss: computed the
  // prompt). Cumulative totals, as SetPrefixCounts.
  struct SessionCounts {
    int64_t live = 0, offloaded = 0, device_bytes = 0, host_bytes = 0;
    int64_t evictions = 0, expirations = 0, hits = 0, misses = 0;
  };
  void SetSessionCounts(const SessionCounts& counts);

  // The names gateways and vLLM's dashboards read (the Gateway API Inference Extension's
  // endpoint picker: waiting, running, KV usage), beside kvserve's own and labelled
  // model_name=`name`: vllm:num_requests_waiting and vllm:num_requests_running (as
  // kvserve_num_requests_*), vllm:kv_cache_usage_perc and its older name
  // vllm:gpu_cache_usage_perc (kv_cache_usage()), vllm:prefix_cache_queries_total and
  // vllm:prefix_cache_hits_total (prompt tokens looked up in the prefix cache, and of those the
  // ones found: kvserve_prompt_tokens_total and kvserve_prompt_tokens_cached_total). Exported
  // from this call on (with the values so far); call once, when the model's name is known.
  void SetServedModelName(const std::string& name);
  // The fraction of the KV device budget in use (SetKvDeviceBudget), in [0, 1]; 0 without a
  // budget (unlimited: there is no fraction to give).
  double kv_cache_usage() const;

  // The registry in Prometheus text format (what /metrics serves), followed by the process
  // metrics every Prometheus client exports (ProcessMetrics: process_cpu_seconds_total,
  // process_resident_memory_bytes, process_start_time_seconds, process_open_fds, ...).
  std::string TextFormat() const;

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<ProcessMetrics> process_;
  prometheus::Family<prometheus::Counter>* requests_;
  prometheus::Family<prometheus::Counter>* tenant_requests_;
  prometheus::Family<prometheus::Gauge>* tenant_waiting_;
  prometheus::Family<prometheus::Gauge>* tenant_running_;
  prometheus::Family<prometheus::Counter>* rpcs_;
  prometheus::Histogram* e2e_latency_;
  prometheus::Histogram* prefill_time_;
  prometheus::Gauge* kv_device_used_;
  prometheus::Gauge* kv_device_limit_;
  prometheus::Family<prometheus::Gauge>* build_info_;
  prometheus::Gauge* waiting_;
  prometheus::Gauge* running_;
  prometheus::Counter* prompt_tokens_;
  prometheus::Counter* cached_tokens_;
  prometheus::Counter* generated_tokens_;
  prometheus::Counter* forced_tokens_;
  prometheus::Histogram* ttft_;
  prometheus::Histogram* itl_;
  prometheus::Histogram* queue_time_;
  prometheus::Family<prometheus::Gauge>* kv_bytes_;
  prometheus::Counter* oom_events_;
  prometheus::Counter* offload_fallbacks_;
  prometheus::Family<prometheus::Counter>* prefix_queries_;
  prometheus::Family<prometheus::Counter>* prefix_hits_;
  prometheus::Counter* prefix_evictions_;
  prometheus::Gauge* prefix_bytes_;
  prometheus::Family<prometheus::Gauge>* prefix_entries_;
  prometheus::Family<prometheus::Gauge>* sessions_;
  prometheus::Family<prometheus::Gauge>* session_bytes_;
  prometheus::Counter* session_evictions_;
  prometheus::Counter* session_expirations_;
  prometheus::Family<prometheus::Counter>* session_turns_;
  struct VllmSeries;  // the vllm:* series, once SetServedModelName made them
  PrefixCounts last_prefix_counts_ ABSL_GUARDED_BY(mu_);
  prometheus::Family<prometheus::Gauge>* tier_bytes_;
  prometheus::Family<prometheus::Gauge>* tier_entries_;
  prometheus::Family<prometheus::Counter>* tier_hits_;
  prometheus::Family<prometheus::Counter>* tier_demotions_;
  prometheus::Counter* tier_drops_;
  prometheus::Family<prometheus::Counter>* tier_disk_failures_;
  PrefixTierCounts last_tier_counts_ ABSL_GUARDED_BY(mu_);
  SessionCounts last_session_counts_ ABSL_GUARDED_BY(mu_);
  mutable absl::Mutex mu_;
  std::unique_ptr<VllmSeries> vllm_ ABSL_GUARDED_BY(mu_);
  double kv_cache_usage_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::pair<std::string, std::string>, prometheus::Gauge*> kv_gauges_ ABSL_GUARDED_BY(mu_);
  // The tenants with a label of their own ("default" always), and every tenant label value
  // whose queue gauges exist.
  std::set<std::string, std::less<>> tenants_ ABSL_GUARDED_BY(mu_);
  std::set<std::string, std::less<>> tenant_queue_labels_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvserve::server
