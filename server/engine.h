// Engine: the one thread that owns the model and, through its KvCacheManager, every KV cache;
// runs continuous batching (one ragged forward per step over every scheduled sequence). The
// loop is the engine's: inbox, schedule, forward, hand out; each request's decoding is its
// RequestOutput's, named prefixes' persistence the PrefixRegistrar's.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "cache/kv_cache_manager.h"
#include "server/generation_request.h"
#include "server/prefix_event_consumer.h"
#include "server/prefix_registrar.h"
#include "server/request_output.h"
#include "server/request_sink.h"
#include "server/scheduler.h"

namespace kvserve::model {
class Model;
}  // namespace kvserve::model
namespace kvserve::tokenizer {
class Tokenizer;
}  // namespace kvserve::tokenizer

namespace kvserve::server {

class PrefixPersistence;
class ServerMetrics;

struct EngineOptions {
  SchedulerOptions scheduler;
  // --max-forced-tokens: tokens an output constraint may append after a sampled one without
  // sampling them (jump-forward); 0 turns it off.
  int max_forced_tokens = 16;
  // The KV memory: device budget and fault injection, prefix cache size, automatic reuse,
  // sessions.
  cache::KvCacheManagerOptions kv;
  // The fingerprint snapshots are made with (see ModelFingerprint). Non-empty.
  std::string model_fingerprint = "unnamed-model";
  // How long the engine thread sleeps at most while idle before it looks at deadlines.
  absl::Duration idle_poll = absl::Milliseconds(20);
  // Time of arrivals, deadlines, TTFT and prefix TTLs; must outlive the engine.
  const base::Clock* clock = base::RealClock::Get();
  // Where the named prefixes' changes are recorded (null: nowhere); must outlive the engine.
  PrefixPersistence* persistence = nullptr;
  // Who else hears the prefix store's events, drained once per step (the KV-event
  // publisher); not owned, must outlive the engine.
  std::vector<PrefixEventConsumer*> event_consumers;
};

// A consistent snapshot of the engine's state, for health, metrics and tests.
struct EngineStats {
  int64_t num_waiting = 0;  // submitted, not admitted yet
  int64_t num_running = 0;  // admitted, not finished
  int64_t kv_device_bytes = 0;
  int64_t kv_host_bytes = 0;
  int64_t kv_device_peak_bytes = 0;    // the most device KV (caches + snapshots) at once
  int64_t prefix_bytes = 0;            // prefix snapshots held
  int64_t num_steps = 0;               // forwards run so far
  int64_t num_oom_events = 0;          // out-of-memory errors caught during steps
  int64_t num_offload_fallbacks = 0;   // caches converted to offloaded form
  int64_t prompt_tokens_computed = 0;  // prompt tokens run through the model, all requests
  cache::PrefixStoreStats prefixes;
  cache::SessionStats sessions;
};

// A session call on the engine thread (create, get, list, close, roll back); it answers its
// caller itself.
using SessionTask = std::function<void(cache::SessionTable&)>;

// Thread model: Submit, Cancel, RegisterPrefix, DeletePrefix, RunSessionCall, catalog,
// sessions, Stats and Shutdown may be called from any thread; everything that touches tensors
// runs on the engine's own thread (started by Create).
class Engine {
 public:
  // `model`, `tokenizer` (null: outputs carry token ids and no text) and `metrics` must
  // outlive the engine. InvalidArgument naming the option when `options` is out of range.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const EngineOptions& options,
                                                        model::Model* model,
                                                        const tokenizer::Tokenizer* tokenizer,
                                                        ServerMetrics* metrics);
  // Shuts down with no grace period.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a validated request; its results go to `sink`. Returns the id to Cancel it with.
  // ResourceExhausted when --max-queue requests are already waiting or its cache can never
  // fit, Unavailable once Shutdown has begun; the sink is not called then.
  absl::StatusOr<RequestId> Submit(GenerationRequest request, std::shared_ptr<RequestSink> sink);

  // Ends a request with CANCELLED and frees its cache before the next step. Unknown or
  // already finished ids are ignored.
  void Cancel(RequestId id);

  // Prefills `token_ids` (>= 1, each in the vocabulary, within the context) as a prefill-only
  // sequence through the scheduler (chunked and budgeted beside running requests, whole for
  // a quantized strategy) and stores the snapshot under `name`. `done` is called exactly
  // once, from the engine thread or (with persistence, once the prefix is durable) the
  // persistence's thread, with the store's answer (see PrefixStore::PutNamed), Unavailable
  // after Shutdown began, the forward's error, or Internal when it could not be recorded
  // (the prefix is then deleted again). `encoder_ids`: an encoder-decoder model's prefix
  // content (token_ids are then its decoder start tokens; see PrefixRegistration).
  void RegisterPrefix(std::string name, std::vector<int32_t> token_ids, cache::CacheSpec strategy,
                      cache::NamedPrefixOptions options, RegisterCallback done,
                      std::vector<int32_t> encoder_ids = {});
  // Deletes the named prefix (qualified) on the engine thread and replies once the deletion is
  // durable; a deletion that cannot be recorded is undone (see PrefixRegistrar::Delete).
  // `done` is called once, from any thread.
  void DeletePrefix(std::string name, DeleteCallback done);
  // Runs `task` on the engine thread before the next step. False, without running it, once
  // Shutdown has begun. Tasks queued before then run even during the shutdown.
  bool RunSessionCall(SessionTask task);

  // The named prefixes as last published (after each step). Any thread.
  std::shared_ptr<const cache::PrefixCatalog> catalog() const;
  // The open sessions' options. Any thread.
  const cache::SessionDirectory& sessions() const;

  // Stops accepting requests, lets live ones run for up to `grace`, then ends the rest with
  // finish reason kCancelled and their partial output, and joins the engine thread.
  // Idempotent; blocks until the thread has stopped.
  void Shutdown(absl::Duration grace);

  EngineStats Stats() const;
  // Every prefix-store entry, named and automatic, with its tokens and the event-log number it
  // matches (see PrefixStore::ListEntries). Any thread.
  cache::StoreListing ListCacheEntries() const;

  // Blocks until no request is live (waiting or running) or `timeout` passes; returns whether
  // the engine went idle. For tests and benchmarks.
  bool WaitIdle(absl::Duration timeout) const;

 private:
  struct Live;  // a sequence's engine-thread state (a request or a registration)
  struct Incoming {
    RequestId id;
    GenerationRequest request;
    std::shared_ptr<RequestSink> sink;
  };
  struct Registration {
    std::string name;
    std::vector<int32_t> token_ids;
    cache::CacheSpec strategy;
    cache::NamedPrefixOptions options;
    RegisterCallback done;
    std::vector<int32_t> encoder_ids;  // encoder-decoder models: the prefix's encoder input
  };
  class Admission;  // the scheduler's admission policy: the cache manager's answer

  Engine(const EngineOptions& options, model::Model* model, const tokenizer::Tokenizer* tokenizer,
         ServerMetrics* metrics, std::unique_ptr<cache::KvCacheManager> kv);

  void Loop();
  // Moves submitted requests and registrations into the manager and the scheduler, applies
  // cancels, deletions and posted work. Engine thread.
  void DrainInbox();
  // Queues work for the engine thread; false once the loop has ended.
  bool Post(std::function<void()> work);
  void AddRequest(Incoming in);
  void AddRegistration(RequestId id, Registration registration);
  // Fails requests whose deadline has passed. Engine thread.
  void ExpireDeadlines(absl::Time now);
  // Ends every live request with finish reason kCancelled (shutdown grace over).
  void CancelAllLive();
  // Runs one scheduled step; returns false when there was nothing to run.
  bool Step();
  // Allocates a newly admitted sequence's cache (prefix copied) and starts its output; false
  // when it failed (and was ended).
  bool Allocate(RequestId id, Live& live, absl::Time now);
  // Runs the forward over the plan's sequences not `ended`, with the out-of-memory
  // fallback: a step that runs out of memory is rolled back, memory is freed (snapshots,
  // then the largest cache offloaded) and the step runs again; only when nothing is left to
  // move does the largest sequence fail alone (marked in `ended`). The logits per sequence
  // index of the plan, or the forward's error.
  struct ForwardResult;
  ForwardResult RunForward(const StepPlan& plan, std::vector<bool>& ended);
  // Hands a sequence's logits to its output and applies what changed (rows, timings); why
  // the request finished, if it did, or the error that must end it. *forced: tokens the
  // output appended without sampling (jump-forward), which the next step runs.
  absl::StatusOr<std::optional<FinishReason>> HandOut(RequestId id, Live& live,
                                                      const at::Tensor& logits, absl::Time now,
                                                      int64_t* forced);
  // Ends a request: reports to its sink, counts it, frees its cache. Scheduler state is the
  // caller's business.
  void Finish(RequestId id, FinishReason reason);
  void Fail(RequestId id, const absl::Status& status);
  // Forgets a sequence everywhere but the scheduler (the caller's business). A session turn
  // gives its cache back to its session when `keep_session_cache`.
  void Forget(RequestId id, bool keep_session_cache = false);
  // Recomputes EngineStats and the queue and KV metrics. Engine thread.
  void PublishStats();
  // The scheduler's plan could not be updated (an engine bug): its sequences fail and the
  // scheduler takes the next plan.
  void RecoverFromFailedUpdate(const StepPlan& plan, const absl::Status& status);

  const EngineOptions options_;
  model::Model* const model_;
  ServerMetrics* const metrics_;
  const base::Clock* const clock_;
  const OutputModel output_model_;
  std::unique_ptr<cache::KvCacheManager> kv_;                   // engine thread only
  PrefixRegistrar registrar_;                                   // engine thread only
  Admission* admission_ = nullptr;                              // owned by scheduler_
  std::unique_ptr<Scheduler> scheduler_;                        // engine thread only
  absl::flat_hash_map<RequestId, std::unique_ptr<Live>> live_;  // engine thread only
  int64_t num_oom_events_ = 0;                                  // engine thread
  int64_t num_steps_ = 0;                                       // engine thread
  int64_t prompt_tokens_computed_ = 0;                          // engine thread

  mutable absl::Mutex mu_;
  std::vector<Incoming> inbox_ ABSL_GUARDED_BY(mu_);
  std::vector<RequestId> cancels_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<RequestId, Registration>> registrations_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<std::string, DeleteCallback>> deletions_ ABSL_GUARDED_BY(mu_);
  std::vector<SessionTask> session_calls_ ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void()>> posted_ ABSL_GUARDED_BY(mu_);
  bool loop_ended_ ABSL_GUARDED_BY(mu_) = false;
  RequestId next_id_ ABSL_GUARDED_BY(mu_) = 1;
  // Submitted and not yet admitted or ended: what --max-queue bounds.
  int64_t num_queued_ ABSL_GUARDED_BY(mu_) = 0;
  // Submitted and not yet ended (requests and registrations).
  int64_t num_live_ ABSL_GUARDED_BY(mu_) = 0;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time drain_deadline_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  EngineStats stats_ ABSL_GUARDED_BY(mu_);

  std::thread thread_;
  absl::Mutex shutdown_mu_;  // serializes Shutdown callers
};

}  // namespace kvserve::server
