// Engine: the continuous-batching loop on its own thread. KV memory decisions belong to the
// KvCacheManager, each request's decoding to its RequestOutput, named prefixes' persistence to
// the PrefixRegistrar; the engine keeps the inbox, the scheduler, the forward and the hand-out.
#include "server/engine.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <exception>
#include <map>
#include <optional>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "cache/kv_cache.h"
#include "cache/torch_compat.h"
#include "model/model.h"
#include "server/kv_metrics.h"
#include "server/metrics.h"

namespace kvserve::server {
namespace {

// "resource_exhausted", "deadline_exceeded", ...: a failed request's outcome label.
std::string OutcomeLabel(const absl::Status& status) {
  return absl::AsciiStrToLower(absl::StatusCodeToString(status.code()));
}

double Ms(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }

// The batch rows a request decodes in: its beams, or its samples.
int64_t RowsOf(const GenerationRequest& r) {
  return std::max<int64_t>(r.num_beams, r.num_return_sequences);
}

cache::KvModelShape ShapeOf(const model::ModelInfo& info, const std::string& fingerprint) {
  return {.layers = info.layer_specs,
          .num_kv_heads = info.num_kv_heads,
          .head_dim = info.head_dim,
          .bytes_per_element = static_cast<int64_t>(c10::elementSize(info.dtype)),
          .fingerprint = fingerprint,
          .max_positions = info.max_position_embeddings};
}

}  // namespace

// The scheduler asks the cache manager; answers that refuse for good keep their reason for
// the request's error.
class Engine::Admission final : public AdmissionPolicy {
 public:
  explicit Admission(cache::KvCacheManager* kv) : kv_(kv) {}

  Answer Admit(const AdmissionQuery& query) override {
    const cache::Admission a = kv_->CanAdmit(query.id, query.admitted_this_step);
    Answer answer{.num_cached_tokens = a.num_cached_tokens};
    switch (a.decision) {
      case cache::Admission::Decision::kAdmit:
        answer.decision = Decision::kAdmit;
        break;
      case cache::Admission::Decision::kWait:
        answer.decision = Decision::kDefer;
        break;
      case cache::Admission::Decision::kNever:
        answer.decision = Decision::kReject;
        refusals_[query.id] = a.reason;
        break;
    }
    return answer;
  }

  // Why `id` was refused (and forgets it).
  std::string TakeRefusal(RequestId id) {
    auto it = refusals_.find(id);
    if (it == refusals_.end()) return "the request's KV cache cannot fit the device budget";
    std::string reason = std::move(it->second);
    refusals_.erase(it);
    return reason;
  }

 private:
  cache::KvCacheManager* const kv_;
  absl::flat_hash_map<RequestId, std::string> refusals_;
};

struct Engine::Live {
  // A request (sink set) or a registration (registration_done set).
  GenerationRequest request;
  std::shared_ptr<RequestSink> sink;
  RegisterCallback registration_done;
  // The whole prompt (a session turn's history included) until the output takes over.
  std::vector<int32_t> prompt;
  std::unique_ptr<RequestOutput> output;  // a request's, once admitted
  std::string prefix_name;                // the named prefix its reused tokens include; empty: none
  int64_t num_cached_tokens = 0;
  std::string session_recompute_reason;  // a session turn's: why its cache was not reused
  std::string prefix_kv_mode;            // how its reused prefix reached its cache
  bool admitted = false;
  absl::Time admitted_at;
  absl::Time first_token_at;
  absl::Time last_token_at;

  bool is_registration() const { return sink == nullptr; }
  // The one row's tokens: the prompt, then every generated token.
  const std::vector<int32_t>& tokens() const { return output ? output->tokens() : prompt; }
};

struct Engine::ForwardResult {
  absl::StatusOr<model::ForwardOutput> output = model::ForwardOutput{};
  // Per sequence of the plan: its index in the batch the forward ran, or -1.
  std::vector<int> batch_index;
};

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const EngineOptions& options,
                                                       model::Model* model,
                                                       const tokenizer::Tokenizer* tokenizer,
                                                       ServerMetrics* metrics) {
  if (model == nullptr || metrics == nullptr) {
    return absl::InvalidArgumentError("Engine::Create: model and metrics are required");
  }
  if (options.idle_poll <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("idle_poll must be > 0");
  }
  if (options.clock == nullptr) return absl::InvalidArgumentError("the engine needs a clock");
  absl::StatusOr<std::unique_ptr<cache::KvCacheManager>> kv = cache::KvCacheManager::Create(
      options.kv, ShapeOf(model->info(), options.model_fingerprint), options.clock);
  if (!kv.ok()) return kv.status();
  std::unique_ptr<Engine> engine(new Engine(options, model, tokenizer, metrics, *std::move(kv)));
  auto admission = std::make_unique<Admission>(engine->kv_.get());
  engine->admission_ = admission.get();
  absl::StatusOr<std::unique_ptr<Scheduler>> scheduler =
      Scheduler::Create(options.scheduler, std::move(admission));
  if (!scheduler.ok()) return scheduler.status();
  engine->scheduler_ = *std::move(scheduler);
  engine->thread_ = std::thread([e = engine.get()] { e->Loop(); });
  return engine;
}

Engine::Engine(const EngineOptions& options, model::Model* model,
               const tokenizer::Tokenizer* tokenizer, ServerMetrics* metrics,
               std::unique_ptr<cache::KvCacheManager> kv)
    : options_(options),
      model_(model),
      metrics_(metrics),
      clock_(options.clock),
      output_model_{.eos_token_ids = model->info().eos_token_ids,
                    .vocab_size = model->info().vocab_size,
                    .max_forced_tokens = options.max_forced_tokens,
                    .tokenizer = tokenizer},
      kv_(std::move(kv)),
      registrar_(
          kv_.get(), options.persistence,
          [this](std::function<void()> work) { return Post(std::move(work)); },
          options.event_consumers) {}

Engine::~Engine() { Shutdown(absl::ZeroDuration()); }

absl::StatusOr<RequestId> Engine::Submit(GenerationRequest request,
                                         std::shared_ptr<RequestSink> sink) {
  // Refused at once when it can never fit (the estimate is a pure function of the shape).
  const int64_t limit = options_.kv.budget.device_limit_bytes;
  if (limit >= 0 && request.cache_spec.use_cache()) {
    const cache::KvCacheManager::Estimate estimate = kv_->EstimateBytes(
        static_cast<int64_t>(request.prompt_ids.size()) + request.max_new_tokens - 1,
        RowsOf(request));
    if (estimate.offloaded_resident_bytes > limit) {
      metrics_->CountRequest("resource_exhausted");
      return absl::ResourceExhaustedError(absl::StrCat(
          "the request's KV cache needs ", estimate.offloaded_resident_bytes,
          " device bytes even offloaded (", estimate.total_bytes,
          " on the device), above the KV device budget of ", limit, " bytes (--kv-device-bytes)"));
    }
  }
  absl::MutexLock lock(&mu_);
  if (draining_) {
    metrics_->CountRequest("unavailable");
    return absl::UnavailableError("the server is shutting down");
  }
  if (num_queued_ >= options_.scheduler.max_queue) {
    metrics_->CountRequest("resource_exhausted");
    return absl::ResourceExhaustedError(absl::StrCat("the server's queue is full (--max-queue ",
                                                     options_.scheduler.max_queue,
                                                     "); retry later"));
  }
  const RequestId id = next_id_++;
  ++num_queued_;
  ++num_live_;
  inbox_.push_back({id, std::move(request), std::move(sink)});
  return id;
}

void Engine::Cancel(RequestId id) {
  absl::MutexLock lock(&mu_);
  cancels_.push_back(id);
}

void Engine::RegisterPrefix(std::string name, std::vector<int32_t> token_ids,
                            cache::CacheSpec strategy, cache::NamedPrefixOptions options,
                            RegisterCallback done, std::vector<int32_t> encoder_ids) {
  {
    absl::MutexLock lock(&mu_);
    if (!draining_) {
      const RequestId id = next_id_++;
      ++num_live_;
      registrations_.emplace_back(
          id, Registration{std::move(name), std::move(token_ids), std::move(strategy),
                           std::move(options), std::move(done), std::move(encoder_ids)});
      return;
    }
  }
  done(absl::UnavailableError("the server is shutting down"));
}

void Engine::DeletePrefix(std::string name, DeleteCallback done) {
  {
    absl::MutexLock lock(&mu_);
    if (!draining_) {
      deletions_.emplace_back(std::move(name), std::move(done));
      return;
    }
  }
  done(absl::UnavailableError("the server is shutting down"));
}

bool Engine::RunSessionCall(SessionTask task) {
  absl::MutexLock lock(&mu_);
  if (draining_) return false;
  session_calls_.push_back(std::move(task));
  return true;
}

bool Engine::Post(std::function<void()> work) {
  absl::MutexLock lock(&mu_);
  if (loop_ended_) return false;
  posted_.push_back(std::move(work));
  return true;
}

std::shared_ptr<const cache::PrefixCatalog> Engine::catalog() const { return kv_->catalog().Get(); }

const cache::SessionDirectory& Engine::sessions() const { return kv_->sessions().directory(); }

void Engine::Shutdown(absl::Duration grace) {
  absl::MutexLock shutdown_lock(&shutdown_mu_);
  {
    absl::MutexLock lock(&mu_);
    const absl::Time deadline = clock_->Now() + grace;
    draining_ = true;
    drain_deadline_ = std::min(drain_deadline_, deadline);
  }
  if (thread_.joinable()) thread_.join();
}

EngineStats Engine::Stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

cache::StoreListing Engine::ListCacheEntries() const { return kv_->prefix_store().ListEntries(); }

bool Engine::WaitIdle(absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return num_live_ == 0 && stats_.kv_device_bytes == 0 && stats_.kv_host_bytes == 0;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&idle), timeout);
}

void Engine::Loop() {
  while (true) {
    DrainInbox();
    const absl::Time now = clock_->Now();
    ExpireDeadlines(now);
    bool draining = false;
    absl::Time drain_deadline;
    {
      absl::MutexLock lock(&mu_);
      draining = draining_;
      drain_deadline = drain_deadline_;
    }
    if (draining && now >= drain_deadline) CancelAllLive();
    if (draining && live_.empty()) break;
    const bool ran = Step();
    kv_->Maintain();
    registrar_.Publish();
    PublishStats();
    if (!ran) {
      absl::MutexLock lock(&mu_);
      auto has_work = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return !inbox_.empty() || !cancels_.empty() || !registrations_.empty() ||
               !deletions_.empty() || !session_calls_.empty() || !posted_.empty();
      };
      mu_.AwaitWithTimeout(absl::Condition(&has_work), options_.idle_poll);
    }
  }
  // Work that arrived after the last drain: the engine no longer runs it, but session calls
  // and posted work (undoes of unrecorded changes) are quick and answer on their own.
  std::vector<std::pair<RequestId, Registration>> late;
  std::vector<std::pair<std::string, DeleteCallback>> deletions;
  std::vector<SessionTask> session_calls;
  std::vector<std::function<void()>> posted;
  {
    absl::MutexLock lock(&mu_);
    late.swap(registrations_);
    deletions.swap(deletions_);
    session_calls.swap(session_calls_);
    posted.swap(posted_);
    loop_ended_ = true;
    num_live_ -= static_cast<int64_t>(late.size());
  }
  for (auto& [id, registration] : late) {
    registration.done(absl::UnavailableError("the server is shutting down"));
  }
  for (auto& [name, done] : deletions) done(absl::UnavailableError("the server is shutting down"));
  for (SessionTask& task : session_calls) task(kv_->sessions());
  for (std::function<void()>& work : posted) work();
  kv_->Maintain();
  registrar_.Publish();
  PublishStats();
}

void Engine::DrainInbox() {
  std::vector<Incoming> incoming;
  std::vector<RequestId> cancels;
  std::vector<std::pair<RequestId, Registration>> registrations;
  std::vector<std::pair<std::string, DeleteCallback>> deletions;
  std::vector<SessionTask> session_calls;
  std::vector<std::function<void()>> posted;
  {
    absl::MutexLock lock(&mu_);
    incoming.swap(inbox_);
    cancels.swap(cancels_);
    registrations.swap(registrations_);
    deletions.swap(deletions_);
    session_calls.swap(session_calls_);
    posted.swap(posted_);
  }
  for (std::function<void()>& work : posted) work();
  for (auto& [name, done] : deletions) registrar_.Delete(name, std::move(done));
  // Before new requests, so that a turn sent after a session call's reply sees its effect.
  for (SessionTask& task : session_calls) task(kv_->sessions());
  for (auto& [id, registration] : registrations) AddRegistration(id, std::move(registration));
  for (Incoming& in : incoming) AddRequest(std::move(in));
  for (RequestId id : cancels) {
    auto it = live_.find(id);
    if (it == live_.end() || it->second->is_registration()) continue;
    scheduler_->Abort(id);
    // gRPC cancels a call whose deadline passed: that is counted as deadline_exceeded.
    Fail(id, it->second->request.deadline <= clock_->Now()
                 ? absl::DeadlineExceededError("the request's deadline passed before it finished")
                 : absl::CancelledError("the client cancelled the request"));
  }
}

void Engine::AddRequest(Incoming in) {
  const RequestId id = in.id;
  auto live = std::make_unique<Live>();
  live->request = std::move(in.request);
  live->sink = std::move(in.sink);
  const GenerationRequest& r = live->request;
  cache::SequenceRequest sequence;
  sequence.prompt = r.prompt_ids;
  sequence.max_new_tokens = r.max_new_tokens;
  sequence.rows = RowsOf(r);
  sequence.cache = r.cache_spec;
  sequence.named_prefix = r.prefix_snapshot;
  sequence.named_prefix_name = r.prefix;
  sequence.prefix_space = r.tenant;
  sequence.skip_prefix_reuse = r.skip_prefix_reuse;
  sequence.prefix_kv_mode = r.prefix_kv_mode;
  sequence.session = r.session;
  sequence.session_append = r.session_append;
  sequence.first_turn_prompt = r.first_turn_ids;
  live->request.prefix_snapshot = nullptr;  // the manager holds it while the request waits
  Live& added = *live;
  live_.emplace(id, std::move(live));
  absl::Status status = kv_->Add(id, std::move(sequence));
  if (status.ok()) {
    // A session turn's prompt has the session's history in front.
    const std::optional<cache::SequenceInfo> info = kv_->info(id);
    added.prompt = info->prompt;
    added.request.prompt_ids = info->prompt;
    status = scheduler_->Add(id, static_cast<int64_t>(added.prompt.size()),
                             added.request.max_new_tokens, /*num_cached_tokens=*/0,
                             info->prefill_whole ? PrefillMode::kWhole : PrefillMode::kChunked,
                             RowsOf(added.request), added.request.tenant);
  }
  if (!status.ok()) Fail(id, status);
}

void Engine::AddRegistration(RequestId id, Registration registration) {
  auto live = std::make_unique<Live>();
  live->registration_done = std::move(registration.done);
  live->prompt = registration.token_ids;
  live->request.encoder_ids = std::move(registration.encoder_ids);
  live->request.arrival_time = clock_->Now();
  const int64_t num_prompt = static_cast<int64_t>(registration.token_ids.size());
  cache::SequenceRequest sequence;
  sequence.prompt = std::move(registration.token_ids);
  sequence.cache = registration.strategy;
  sequence.registration = true;
  sequence.registration_name = std::move(registration.name);
  sequence.registration_options = std::move(registration.options);
  live_.emplace(id, std::move(live));
  absl::Status added = kv_->Add(id, std::move(sequence));
  if (added.ok()) {
    added =
        scheduler_->Add(id, num_prompt, /*max_new_tokens=*/1, /*num_cached_tokens=*/0,
                        kv_->info(id)->prefill_whole ? PrefillMode::kWhole : PrefillMode::kChunked);
  }
  if (!added.ok()) Fail(id, added);
}

void Engine::ExpireDeadlines(absl::Time now) {
  std::vector<RequestId> expired;
  for (const auto& [id, live] : live_) {
    if (live->request.deadline <= now) expired.push_back(id);
  }
  for (RequestId id : expired) {
    scheduler_->Abort(id);
    Fail(id, absl::DeadlineExceededError("the request's deadline passed before it finished"));
  }
}

void Engine::CancelAllLive() {
  std::vector<RequestId> ids;
  for (const auto& [id, live] : live_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  for (RequestId id : ids) {
    scheduler_->Abort(id);
    Live& live = *live_.at(id);
    if (live.is_registration()) {
      Fail(id, absl::UnavailableError("the server is shutting down"));
      continue;
    }
    // What the output held back goes out with the partial answer.
    if (live.output != nullptr) live.output->Cut(FinishReason::kCancelled);
    Finish(id, FinishReason::kCancelled);
  }
}

bool Engine::Allocate(RequestId id, Live& live, absl::Time now) {
  live.admitted = true;
  live.admitted_at = now;
  {
    absl::MutexLock lock(&mu_);
    if (!live.is_registration()) --num_queued_;
  }
  absl::StatusOr<cache::Allocation> allocation = kv_->Allocate(id);
  if (!allocation.ok()) {
    Fail(id, allocation.status());
    return false;
  }
  if (allocation->offload_fallback) metrics_->CountOffloadFallback();
  live.num_cached_tokens = allocation->num_cached_tokens;
  live.prefix_name = allocation->prefix_name;
  live.session_recompute_reason = allocation->session_recompute_reason;
  live.prefix_kv_mode = allocation->prefix_kv_mode;
  if (live.is_registration()) return true;
  metrics_->ObserveQueueTime(absl::ToDoubleSeconds(now - live.request.arrival_time));
  metrics_->AddPromptTokens(static_cast<int64_t>(live.prompt.size()), live.num_cached_tokens);
  absl::StatusOr<std::unique_ptr<RequestOutput>> output =
      RequestOutput::Start(live.request, live.prompt, &output_model_, live.sink.get());
  if (!output.ok()) {
    Fail(id, output.status());
    return false;
  }
  live.output = *std::move(output);
  return true;
}

Engine::ForwardResult Engine::RunForward(const StepPlan& plan, std::vector<bool>& ended) {
  const size_t n = plan.sequences.size();
  ForwardResult result;
  model::Batch batch;
  std::vector<RequestId> with_cache;  // the step's sequences that keep a cache
  auto build_batch = [&] {
    batch.sequences.clear();
    with_cache.clear();
    result.batch_index.assign(n, -1);
    for (size_t i = 0; i < n; ++i) {
      if (ended[i]) continue;
      const ScheduledSequence& s = plan.sequences[i];
      const Live& live = *live_.at(s.id);
      model::SequenceInput input;
      cache::KvCache* cache = kv_->cache(s.id);
      if (cache == nullptr) {
        // Without a cache a sequence is recomputed whole whenever it samples.
        if (!s.samples) continue;
        input.token_ids = live.tokens();
      } else if (live.output != nullptr && live.output->decoding_rows() && !s.is_prefill) {
        // One token per row: beams or samples of one request, in one cache.
        KVSERVE_DCHECK(static_cast<int64_t>(live.output->row_tokens().size()) ==
                           live.output->rows() &&
                       s.rows == live.output->rows())
            << "request " << s.id << ": " << live.output->rows() << " rows, scheduled " << s.rows;
        input.token_ids = live.output->row_tokens();
        input.rows = live.output->rows();
        input.cache = cache;
        with_cache.push_back(s.id);
      } else {
        input.token_ids =
            absl::Span<const int32_t>(live.tokens()).subspan(s.start_position, s.num_tokens);
        input.cache = cache;
        with_cache.push_back(s.id);
      }
      input.encoder_token_ids = live.request.encoder_ids;  // encoder-decoder models only
      input.encoder_state = live.request.cross_attention;
      result.batch_index[i] = static_cast<int>(batch.sequences.size());
      batch.sequences.push_back(input);
    }
  };
  auto fail_in_step = [&](RequestId id, const absl::Status& status) {
    for (size_t i = 0; i < n; ++i) {
      if (plan.sequences[i].id != id || ended[i]) continue;
      Fail(id, status);
      ended[i] = true;
    }
  };
  build_batch();
  while (!batch.sequences.empty()) {
    cache::KvStep step = kv_->BeginStep(with_cache);
    try {
      result.output = model_->Forward(batch);
      step.Commit();
      return result;
    } catch (const compat::OutOfMemoryError& e) {
      // Out of device memory (CUDA's allocator or the KV budget): take the step back, free
      // memory and run the step again; only when nothing is left to move does the largest
      // sequence of the step fail, alone.
      ++num_oom_events_;
      metrics_->CountOutOfMemory();
      spdlog::warn("step out of memory: {}", std::string(e.what_without_backtrace()));
      for (RequestId broken : step.Rollback()) {
        fail_in_step(broken, absl::InternalError("a step could not be rolled back after running "
                                                 "out of memory"));
      }
      const cache::OutOfMemoryAction action = kv_->OnOutOfMemory(with_cache);
      if (action.offloaded) {
        metrics_->CountOffloadFallback();
        spdlog::warn("out of KV memory: a request's cache ({} device bytes) moved to the host",
                     action.offloaded_bytes);
      } else if (action.victim) {
        // The error's text (logged above) holds every tenant's bytes: the caller gets its own.
        fail_in_step(*action.victim, absl::ResourceExhaustedError(action.reason));
      } else if (!action.reclaimed_snapshots && !action.offloaded_idle_sessions) {
        result.output = absl::ResourceExhaustedError(
            "out of KV memory with nothing left to free (--kv-device-bytes)");
        return result;
      }
      build_batch();
    } catch (const c10::Error& e) {
      (void)step.Rollback();
      result.output =
          absl::InternalError(absl::StrCat("forward failed: ", e.what_without_backtrace()));
      return result;
    } catch (const std::exception& e) {
      (void)step.Rollback();
      result.output = absl::InternalError(absl::StrCat("forward failed: ", e.what()));
      return result;
    }
  }
  return result;
}

absl::StatusOr<std::optional<FinishReason>> Engine::HandOut(RequestId id, Live& live,
                                                            const at::Tensor& logits,
                                                            absl::Time now, int64_t* forced) {
  absl::StatusOr<OutputStep> step = live.output->OnLogits(logits);
  if (!step.ok()) return step.status();
  *forced = step->forced_tokens;
  if (step->forced_tokens > 0) metrics_->AddForcedTokens(step->forced_tokens);
  // Timings and counts of a step that sampled.
  if (live.output->num_generated() == 1) {
    live.first_token_at = now;
    metrics_->ObserveTimeToFirstToken(absl::ToDoubleSeconds(now - live.request.arrival_time));
  } else {
    metrics_->ObserveInterTokenLatency(absl::ToDoubleSeconds(now - live.last_token_at));
  }
  live.last_token_at = now;
  metrics_->AddGeneratedTokens(step->tokens_sampled);
  if (step->finished) return step->finished;
  for (const cache::RowChange& change : step->row_changes) {
    if (absl::Status s = kv_->ChangeRows(id, change); !s.ok()) {
      return absl::InternalError(absl::StrCat("rows: ", s.message()));
    }
  }
  if (step->new_rows) {
    if (absl::Status s = scheduler_->SetRows(id, *step->new_rows); !s.ok()) {
      return absl::InternalError(absl::StrCat("rows: ", s.message()));
    }
  }
  return std::optional<FinishReason>();
}

bool Engine::Step() {
  absl::StatusOr<StepPlan> plan = scheduler_->Schedule();
  // Schedule fails only while a plan is in flight, and every step updates its plan (or closes
  // it in RecoverFromFailedUpdate) before the next one.
  KVSERVE_CHECK(plan.ok()) << "scheduler: " << plan.status().message();
  for (RequestId id : plan->rejected) {
    Fail(id, absl::ResourceExhaustedError(admission_->TakeRefusal(id)));
  }
  if (plan->empty()) return false;

  const absl::Time start = clock_->Now();
  const size_t n = plan->sequences.size();
  std::vector<bool> ended(n, false);  // failed at admission or alone out of memory
  for (size_t i = 0; i < n; ++i) {
    const ScheduledSequence& s = plan->sequences[i];
    if (s.newly_admitted && !Allocate(s.id, *live_.at(s.id), start)) ended[i] = true;
  }
  for (size_t i = 0; i < n; ++i) {
    if (!ended[i] && plan->sequences[i].is_prefill) {
      prompt_tokens_computed_ += plan->sequences[i].num_tokens;
    }
  }
  ForwardResult forward = RunForward(*plan, ended);
  const absl::Time now = clock_->Now();
  std::vector<SequenceResult> results;
  results.reserve(n);
  // Sequences whose prompt this step completed, and requests that finished: their prompt is
  // kept (a copy) only after every token of the step went out, so that it never delays one.
  std::vector<RequestId> prefilled;
  std::vector<std::pair<RequestId, FinishReason>> finished;
  for (size_t i = 0; i < n; ++i) {
    const ScheduledSequence& s = plan->sequences[i];
    if (ended[i]) {
      results.push_back({s.id, true});
      continue;
    }
    if (!forward.output.ok()) {
      // One failed forward leaves every cache of the batch with a partial step: the batch's
      // sequences fail; others are untouched.
      spdlog::error("request {}: {}", s.id, std::string(forward.output.status().message()));
      Fail(s.id, forward.output.status());
      results.push_back({s.id, true});
      continue;
    }
    if (!s.samples) {
      results.push_back({s.id, false});
      continue;
    }
    Live& live = *live_.at(s.id);
    if (live.is_registration()) {
      RegisterCallback done = std::move(live.registration_done);
      absl::StatusOr<cache::PrefixInfo> stored = kv_->CompleteRegistration(s.id);
      Forget(s.id);
      // Requests naming it may follow the reply at once: they must find it.
      kv_->Maintain();
      registrar_.Stored(std::move(stored), std::move(done));
      results.push_back({s.id, true});
      continue;
    }
    if (s.is_prefill) {
      // A multi-row request's prompt is kept before its one row becomes several.
      if (live.output->multi_row()) {
        kv_->OnPrefilled(s.id);
      } else {
        prefilled.push_back(s.id);
      }
    }
    int64_t forced = 0;
    absl::StatusOr<std::optional<FinishReason>> reason =
        HandOut(s.id, live, forward.output->logits[forward.batch_index[i]], now, &forced);
    if (!reason.ok()) {
      Fail(s.id, reason.status());
      results.push_back({s.id, true});
      continue;
    }
    if (*reason) finished.emplace_back(s.id, **reason);
    results.push_back({.id = s.id, .finished = reason->has_value(), .forced_tokens = forced});
  }
  for (RequestId id : prefilled) kv_->OnPrefilled(id);
  for (const auto& [id, reason] : finished) Finish(id, reason);
  if (absl::Status updated = scheduler_->Update(results); !updated.ok()) {
    RecoverFromFailedUpdate(*plan, updated);
  }
  ++num_steps_;
  return true;
}

void Engine::RecoverFromFailedUpdate(const StepPlan& plan, const absl::Status& status) {
  spdlog::error("scheduler update: {}; the step's requests fail", std::string(status.message()));
  for (const ScheduledSequence& s : plan.sequences) {
    scheduler_->Abort(s.id);
    Fail(s.id, absl::InternalError("the engine lost track of this request's step"));
  }
  // Every sequence of the plan is aborted: an empty update closes it.
  // Left open, the plan would fail every later step while requests hang.
  const absl::Status closed = scheduler_->Update({});
  KVSERVE_CHECK(closed.ok()) << "scheduler: cannot close a failed plan: " << closed.message();
}

void Engine::Finish(RequestId id, FinishReason reason) {
  Live& live = *live_.at(id);
  const std::optional<cache::SequenceInfo> info = kv_->info(id);
  GenerationSummary summary;
  summary.finish_reason = reason;
  // An encoder-decoder request's prompt is its encoder input and its decoder prompt.
  summary.prompt_tokens =
      static_cast<int64_t>(live.prompt.size() + live.request.encoder_ids.size());
  summary.cached_tokens = live.num_cached_tokens;
  summary.completion_tokens = live.output != nullptr ? live.output->completion_tokens() : 0;
  summary.forced_tokens = live.output != nullptr ? live.output->forced_tokens() : 0;
  summary.num_sequences = live.request.num_return_sequences;
  const absl::Time arrival = live.request.arrival_time;
  summary.queue_ms = live.admitted ? Ms(live.admitted_at - arrival) : 0;
  if (live.output != nullptr && live.output->num_generated() > 0) {
    summary.ttft_ms = Ms(live.first_token_at - arrival);
    summary.decode_ms = Ms(live.last_token_at - live.first_token_at);
  }
  summary.cache_implementation =
      live.request.cache_spec.use_cache() && info ? info->strategy_name : "none";
  summary.offload_fallback = info && info->offload_fallback;
  summary.prefix = std::string(cache::SplitQualifiedPrefixName(live.prefix_name).second);
  summary.session = live.request.session;
  summary.session_recompute_reason = live.session_recompute_reason;
  summary.prefix_kv_mode = live.prefix_kv_mode;
  // Counted before the client hears of it, so that metrics read after a reply include it.
  metrics_->CountRequest(FinishReasonName(reason));
  std::shared_ptr<RequestSink> sink = live.sink;
  // The session keeps the cache and the answer (the stop string included: its tokens are in
  // the cache).
  Forget(id, /*keep_session_cache=*/true);
  sink->OnFinish(summary);
}

void Engine::Fail(RequestId id, const absl::Status& status) {
  auto it = live_.find(id);
  if (it == live_.end()) return;
  Live& live = *it->second;
  if (live.is_registration()) {
    RegisterCallback done = std::move(live.registration_done);
    Forget(id);
    if (done) done(status);
    return;
  }
  metrics_->CountRequest(OutcomeLabel(status));
  std::shared_ptr<RequestSink> sink = live.sink;
  // A cancel or a deadline ends a request between steps: its cache is whole and the session
  // keeps it with the partial answer. Other failures may leave it half-stepped.
  Forget(id, absl::IsCancelled(status) || absl::IsDeadlineExceeded(status));
  sink->OnError(status);
}

void Engine::Forget(RequestId id, bool keep_session_cache) {
  auto it = live_.find(id);
  if (it == live_.end()) return;
  {
    absl::MutexLock lock(&mu_);
    if (!it->second->admitted && !it->second->is_registration()) --num_queued_;
    --num_live_;
  }
  kv_->Release(id, it->second->tokens(), keep_session_cache);
  live_.erase(it);
}

void Engine::PublishStats() {
  const cache::KvCacheManagerStats kv = kv_->Stats();
  PublishKvMetrics(kv, model_->info().device.str(), metrics_);
  metrics_->SetQueue(scheduler_->num_waiting(), scheduler_->num_running());
  std::map<std::string, ServerMetrics::TenantQueue> by_tenant;
  for (const auto& [id, live] : live_) {
    if (live->is_registration()) continue;
    ServerMetrics::TenantQueue& queue = by_tenant[live->request.tenant];
    ++(live->admitted ? queue.running : queue.waiting);
  }
  metrics_->SetTenantQueues(by_tenant);
  absl::MutexLock lock(&mu_);
  stats_.num_waiting = num_queued_;
  stats_.num_running = num_live_ - num_queued_;
  stats_.kv_device_bytes = kv.live.device_bytes;
  stats_.kv_host_bytes = kv.live.host_bytes;
  stats_.kv_device_peak_bytes = kv.budget_peak;
  stats_.prefix_bytes = kv.prefix_bytes;
  stats_.num_steps = num_steps_;
  stats_.num_oom_events = num_oom_events_;
  stats_.num_offload_fallbacks = kv.num_offload_fallbacks;
  stats_.prompt_tokens_computed = prompt_tokens_computed_;
  stats_.prefixes = kv.prefixes;
  stats_.sessions = kv.sessions;
}

}  // namespace kvserve::server
