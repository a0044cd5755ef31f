// Engine: the one thread that owns the model and every KV cache; runs continuous batching
// (one ragged forward per step over every scheduled sequence, each with its own cache).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "cache/kv_memory_budget.h"
#include "server/generation_request.h"
#include "server/scheduler.h"

namespace kvserve::cache {
class PrefixStore;
struct NamedPrefixOptions;
struct PrefixInfo;
}  // namespace kvserve::cache
namespace kvserve::model {
class Model;
class Tokenizer;
}  // namespace kvserve::model

namespace kvserve::server {

class ServerMetrics;

// Where the engine delivers a request's results. Called only from the engine thread, in
// order, never concurrently for one request; implementations must not block (they hand the
// data to gRPC and return). Exactly one of OnFinish or OnError ends every submitted request,
// after which the engine drops its reference and calls nothing more.
class RequestSink {
 public:
  virtual ~RequestSink() = default;
  // Text that became final (UTF-8-complete, never part of a stop string) and the token ids
  // generated since the previous call; either may be empty, not both.
  virtual void OnOutput(std::string_view text, absl::Span<const int32_t> token_ids) = 0;
  // The request ended normally (including finish reason kCancelled at shutdown).
  virtual void OnFinish(const GenerationSummary& summary) = 0;
  // The request failed: CANCELLED (client cancel), DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED,
  // INVALID_ARGUMENT (its cache spec does not suit the model) or INTERNAL.
  virtual void OnError(const absl::Status& status) = 0;
};

struct EngineOptions {
  SchedulerOptions scheduler;
  // --auto-prefix-cache: keep each prompt's K/V (dynamic caches on full-attention models)
  // as an automatic prefix entry, and start later requests from the longest stored prefix of
  // their prompt (named or automatic).
  bool auto_prefix_cache = true;
  // --auto-prefix-min-tokens: shortest prompt kept, and shortest match used, automatically.
  int64_t auto_prefix_min_tokens = 32;
  // The fingerprint snapshots are made with (the prefix store's model fingerprint).
  std::string model_fingerprint;
  // --kv-device-bytes (device_limit_bytes < 0: unlimited) and --fault-inject-oom-rate.
  cache::KvMemoryBudgetOptions kv_budget;
  // How long the engine thread sleeps at most while idle before it looks at deadlines.
  absl::Duration idle_poll = absl::Milliseconds(20);
};

// A consistent snapshot of the engine's state, for health, metrics and tests.
struct EngineStats {
  int64_t num_waiting = 0;  // submitted, not admitted yet
  int64_t num_running = 0;  // admitted, not finished
  int64_t kv_device_bytes = 0;
  int64_t kv_host_bytes = 0;
  int64_t num_steps = 0;              // forwards run so far
  int64_t num_oom_events = 0;         // out-of-memory errors caught during steps
  int64_t num_offload_fallbacks = 0;  // caches converted to offloaded form
};

// Thread model: Submit, Cancel, Stats and Shutdown may be called from any thread; everything
// that touches tensors runs on the engine's own thread (started by Create).
class Engine {
 public:
  // `model`, `tokenizer` (null: outputs carry token ids and no text) and `metrics` must
  // outlive the engine. InvalidArgument naming the option when `options` is out of range.
  // `prefix_store` (may be null: no prefix reuse at all) must outlive the engine too.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const EngineOptions& options,
                                                        model::Model* model,
                                                        const model::Tokenizer* tokenizer,
                                                        ServerMetrics* metrics,
                                                        cache::PrefixStore* prefix_store = nullptr);
  // Shuts down with no grace period.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a validated request; its results go to `sink`. Returns the id to Cancel it with.
  // ResourceExhausted when --max-queue requests are already waiting, Unavailable once
  // Shutdown has begun; the sink is not called then.
  absl::StatusOr<RequestId> Submit(GenerationRequest request, std::shared_ptr<RequestSink> sink);

  // Ends a request with CANCELLED and frees its cache before the next step. Unknown or
  // already finished ids are ignored.
  void Cancel(RequestId id);

  using RegisterCallback = std::function<void(absl::StatusOr<cache::PrefixInfo>)>;
  // Prefills `token_ids` (>= 1, each in the vocabulary, within the context) once, between
  // two steps on the engine thread, and stores the snapshot under `name` in the prefix store.
  // `done` is called exactly once, on the engine thread, with the store's answer (see
  // PrefixStore::PutNamed), FailedPrecondition without a prefix store, Unavailable after
  // Shutdown began, or the forward's error. Thread-safe.
  void RegisterPrefix(std::string name, std::vector<int32_t> token_ids,
                      const cache::NamedPrefixOptions& options, RegisterCallback done);

  // Stops accepting requests, lets live ones run for up to `grace`, then ends the rest with
  // finish reason kCancelled and their partial output, and joins the engine thread.
  // Idempotent; blocks until the thread has stopped.
  void Shutdown(absl::Duration grace);

  EngineStats Stats() const;

  // Blocks until no request is live (waiting or running) or `timeout` passes; returns whether
  // the engine went idle. For tests and benchmarks.
  bool WaitIdle(absl::Duration timeout) const;

 private:
  struct Live;  // a request's engine-thread state
  struct Incoming {
    RequestId id;
    GenerationRequest request;
    std::shared_ptr<RequestSink> sink;
  };
  struct Registration;

  Engine(const EngineOptions& options, model::Model* model, const model::Tokenizer* tokenizer,
         ServerMetrics* metrics, cache::PrefixStore* prefix_store,
         std::unique_ptr<cache::KvMemoryBudget> budget, std::unique_ptr<Scheduler> scheduler);

  void Loop();
  // Moves submitted requests into the scheduler and applies cancels. Engine thread.
  void DrainInbox();
  // Runs one registration's prefill and stores its snapshot. Engine thread.
  void RunRegistration(Registration& registration);
  // The prompt's cached prefix to copy (named, else automatic), or an empty match.
  struct PrefixChoice;
  PrefixChoice ChoosePrefix(const GenerationRequest& request);
  // Keeps a just-prefilled prompt as an automatic prefix entry when it qualifies.
  void KeepAutomaticPrefix(const Live& live);
  // The out-of-memory fallback: converts the running request whose cache holds the most
  // device bytes to its offloaded form. False when no cache has device bytes left to move.
  bool OffloadLargestCache();
  // Copies the request's cached prefix into its new cache, falling back to an offloaded
  // cache when the copy runs out of memory. Engine thread.
  absl::Status LoadPrefix(Live& live);
  // Fails requests whose deadline has passed. Engine thread.
  void ExpireDeadlines(absl::Time now);
  // Ends every live request with finish reason kCancelled (shutdown grace over).
  void CancelAllLive();
  // Runs one scheduled step; returns false when there was nothing to run.
  bool Step();
  // Builds an admitted request's cache; false (request failed and forgotten) on error.
  bool Admit(RequestId id, Live& live, absl::Time now);
  // Appends a sampled token and reports output; returns whether the request finished.
  bool AcceptToken(RequestId id, Live& live, int32_t token, absl::Time now);
  // Ends a request: reports to its sink, counts it, frees its cache. Scheduler state is the
  // caller's business.
  void Finish(RequestId id, Live& live, FinishReason reason);
  void Fail(RequestId id, const absl::Status& status);
  // Recomputes EngineStats and the queue and KV metrics. Engine thread.
  void PublishStats();

  const EngineOptions options_;
  model::Model* const model_;
  const model::Tokenizer* const tokenizer_;
  ServerMetrics* const metrics_;
  cache::PrefixStore* const prefix_store_;  // null: no prefix reuse
  // Device KV bytes of every live cache against --kv-device-bytes. Engine thread only (the
  // admission policy reads it from Schedule, on the engine thread).
  std::unique_ptr<cache::KvMemoryBudget> budget_;
  // Whether automatic matches may end inside a stored prefix (no sliding/chunked layers).
  bool allow_partial_prefix_ = true;
  std::unique_ptr<Scheduler> scheduler_;                        // engine thread only
  absl::flat_hash_map<RequestId, std::unique_ptr<Live>> live_;  // engine thread only

  mutable absl::Mutex mu_;
  std::vector<Incoming> inbox_ ABSL_GUARDED_BY(mu_);
  std::vector<RequestId> cancels_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Registration>> registrations_ ABSL_GUARDED_BY(mu_);
  RequestId next_id_ ABSL_GUARDED_BY(mu_) = 1;
  // Submitted and not yet admitted or ended: what --max-queue bounds.
  int64_t num_queued_ ABSL_GUARDED_BY(mu_) = 0;
  // Submitted and not yet ended.
  int64_t num_live_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t num_oom_events_ = 0;         // engine thread
  int64_t num_offload_fallbacks_ = 0;  // engine thread
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time drain_deadline_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  EngineStats stats_ ABSL_GUARDED_BY(mu_);

  std::thread thread_;
  absl::Mutex shutdown_mu_;  // serializes Shutdown callers
};

}  // namespace kvserve::server
