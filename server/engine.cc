// Engine: the continuous-batching loop on its own thread. KV memory decisions belong to the
// KvCacheManager; the engine keeps the inbox, the scheduler, the forward, sampling and sinks.
#include "server/engine.h"

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
#include "cache/snapshot.h"
#include "cache/torch_compat.h"
#include "model/model.h"
#include "model/sampler.h"
#include "server/metrics.h"
#include "server/prefix_persistence.h"
#include "server/stop_string_matcher.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"

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

// A float32 CPU row of logits as a span (made contiguous first when it is not).
absl::Span<const float> FloatRow(const at::Tensor& logits, at::Tensor* holder) {
  *holder = logits.to(at::kFloat).contiguous();
  return {holder->data_ptr<float>(), static_cast<size_t>(holder->numel())};
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
  // A request (sink set) or a registration (done set).
  GenerationRequest request;
  std::shared_ptr<RequestSink> sink;
  RegisterCallback registration_done;
  std::string prefix_name;  // the named prefix copied into its cache; empty: none
  int64_t num_cached_tokens = 0;
  std::string session_recompute_reason;  // a session turn's: why its cache was not reused
  std::unique_ptr<model::Sampler> sampler;
  std::unique_ptr<model::IncrementalDetokenizer> detokenizer;  // null without a tokenizer
  StopStringMatcher stop;
  std::vector<int32_t> tokens;  // prompt, then every generated token (one-sequence requests)
  int64_t num_generated = 0;    // steps that sampled
  // Requests with several rows (beams or samples): the cache holds `rows` batch rows once
  // the prompt is done, row i running row_tokens[i] next.
  struct Sample {  // one returned sequence drawn independently
    std::unique_ptr<model::Sampler> sampler;
    std::unique_ptr<model::IncrementalDetokenizer> detokenizer;  // null without a tokenizer
    StopStringMatcher stop;
    std::vector<int32_t> context;  // prompt + its tokens (the repetition penalty's)
    int64_t num_generated = 0;
    std::optional<FinishReason> finish;
  };
  std::vector<Sample> samples;               // num_return_sequences > 1 with sampling
  std::vector<int> row_sample;               // per cache row: its sample
  std::unique_ptr<model::BeamSearch> beams;  // num_beams > 1
  std::vector<int32_t> row_tokens;
  int64_t rows = 1;
  int64_t completion_tokens = 0;  // several sequences: tokens over those returned
  std::vector<float> log_probs;   // scratch for log-probabilities
  bool admitted = false;
  absl::Time admitted_at;
  absl::Time first_token_at;
  absl::Time last_token_at;

  bool is_registration() const { return sink == nullptr; }
  bool multi_row() const { return beams != nullptr || !samples.empty(); }
};

struct Engine::ForwardResult {
  absl::StatusOr<model::ForwardOutput> output = model::ForwardOutput{};
  // Per sequence of the plan: its index in the batch the forward ran, or -1.
  std::vector<int> batch_index;
};

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const EngineOptions& options,
                                                       model::Model* model,
                                                       const model::Tokenizer* tokenizer,
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

Engine::Engine(const EngineOptions& options, model::Model* model, const model::Tokenizer* tokenizer,
               ServerMetrics* metrics, std::unique_ptr<cache::KvCacheManager> kv)
    : options_(options),
      model_(model),
      tokenizer_(tokenizer),
      metrics_(metrics),
      clock_(options.clock),
      kv_(std::move(kv)),
      persistence_(options.persistence) {
  kv_->SetCatalogListener([this](const cache::CatalogChange& change) { OnCatalogChange(change); });
}

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
    return absl::ResourceExhaustedError(
        absl::StrCat("the queue is full (", num_queued_, " requests wait; --max-queue ",
                     options_.scheduler.max_queue, "); retry later"));
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
                            RegisterCallback done) {
  {
    absl::MutexLock lock(&mu_);
    if (!draining_) {
      const RequestId id = next_id_++;
      ++num_live_;
      registrations_.emplace_back(
          id, Registration{std::move(name), std::move(token_ids), std::move(strategy),
                           std::move(options), std::move(done)});
      return;
    }
  }
  done(absl::UnavailableError("the server is shutting down"));
}

void Engine::DeletePrefix(std::string name, DeleteCallback done) {
  {
    absl::MutexLock lock(&mu_);
    if (!draining_) {
      deletions_.push_back({std::move(name), std::move(done)});
      return;
    }
  }
  done(absl::UnavailableError("the server is shutting down"));
}

void Engine::ApplyDeletion(Deletion deletion) {
  // Named as the caller named it (without its namespace).
  const std::string name(cache::SplitQualifiedPrefixName(deletion.name).second);
  constexpr size_t kMaxQuoted = 128;
  const absl::Status not_found = absl::NotFoundError(absl::StrCat(
      "name: no prefix named '", name.substr(0, kMaxQuoted),
      name.size() > kMaxQuoted ? absl::StrCat("... (", name.size(), " bytes)") : std::string(),
      "' is registered"));
  if (persistence_ != nullptr && deletion.kind == Deletion::Kind::kClient) {
    if (!kv_->HasPrefix(deletion.name)) {
      deletion.done(not_found);
      return;
    }
    // Recorded first: a deletion that cannot be saved leaves the prefix registered.
    const std::string name = deletion.name;
    persistence_->RecordDelete(
        name, [this, name, done = std::move(deletion.done)](absl::Status saved) mutable {
          if (!saved.ok()) {
            done(saved);
            return;
          }
          absl::MutexLock lock(&mu_);
          deletions_.push_back({name, std::move(done), Deletion::Kind::kRecorded});
        });
    return;
  }
  // Recorded already (or nothing records): the listener must not record it again. An undone
  // put's deletion is recorded by the listener, so that the record follows the catalog.
  const bool record = deletion.kind == Deletion::Kind::kUndo;
  if (!record) deleting_.push_back(deletion.name);
  const bool found = kv_->DeletePrefix(deletion.name);
  if (!record) deleting_.pop_back();
  kv_->PublishCatalog();
  deletion.done(found ? absl::OkStatus() : not_found);
}

void Engine::OnCatalogChange(const cache::CatalogChange& change) {
  if (persistence_ == nullptr) return;
  if (change.info) {
    // CompleteRegistration records its own put, with the client's reply.
    if (change.name == registering_) return;
    persistence_->RecordPut(change.name,
                            std::vector<int32_t>(change.snapshot->token_ids().begin(),
                                                 change.snapshot->token_ids().end()),
                            change.info->options, change.info->created_at, nullptr);
    return;
  }
  // A deletion the engine recorded before making it needs no second record.
  if (std::find(deleting_.begin(), deleting_.end(), change.name) != deleting_.end()) return;
  persistence_->RecordDelete(change.name, nullptr);
}

void Engine::CompleteRegistration(RequestId id) {
  Live& live = *live_.at(id);
  RegisterCallback done = std::move(live.registration_done);
  const std::string name = kv_->registration_name(id);
  registering_ = name;
  absl::StatusOr<cache::PrefixInfo> stored = kv_->CompleteRegistration(id);
  registering_.clear();
  Forget(id);
  // Requests naming it may follow the reply at once: they must find it.
  kv_->PublishCatalog();
  std::shared_ptr<const cache::Snapshot> snapshot =
      stored.ok() ? kv_->prefix_snapshot(name) : nullptr;
  if (persistence_ == nullptr || snapshot == nullptr) {
    done(std::move(stored));
    return;
  }
  // The reply waits until the prefix is durable; one that cannot be saved is undone.
  persistence_->RecordPut(
      name, std::vector<int32_t>(snapshot->token_ids().begin(), snapshot->token_ids().end()),
      stored->options, stored->created_at,
      [this, done = std::move(done), info = *stored, name](absl::Status saved) {
        if (saved.ok()) {
          done(info);
          return;
        }
        {
          absl::MutexLock lock(&mu_);
          deletions_.push_back({name, [](absl::Status) {}, Deletion::Kind::kUndo});
        }
        done(saved);
      });
}

std::shared_ptr<const cache::PrefixCatalog> Engine::catalog() const { return kv_->catalog(); }

std::shared_ptr<const cache::SessionOptions> Engine::session_options(const std::string& id) const {
  return kv_->session_options(id);
}

bool Engine::RunOnEngineThread(EngineTask task) {
  absl::MutexLock lock(&mu_);
  if (draining_) return false;
  tasks_.push_back(std::move(task));
  return true;
}

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
    kv_->MaintainSessions();
    kv_->PublishCatalog();
    PublishStats();
    if (!ran) {
      absl::MutexLock lock(&mu_);
      auto has_work = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return !inbox_.empty() || !cancels_.empty() || !registrations_.empty() ||
               !deletions_.empty() || !tasks_.empty();
      };
      mu_.AwaitWithTimeout(absl::Condition(&has_work), options_.idle_poll);
    }
  }
  // Work that arrived after the last drain: the engine no longer runs it.
  std::vector<std::pair<RequestId, Registration>> late;
  std::vector<Deletion> deletions;
  std::vector<EngineTask> tasks;
  {
    absl::MutexLock lock(&mu_);
    late.swap(registrations_);
    deletions.swap(deletions_);
    tasks.swap(tasks_);
    num_live_ -= static_cast<int64_t>(late.size());
  }
  for (auto& [id, registration] : late) {
    registration.done(absl::UnavailableError("the server is shutting down"));
  }
  for (Deletion& deletion : deletions) {
    deletion.done(absl::UnavailableError("the server is shutting down"));
  }
  // Session calls are quick and answer on their own: they still run.
  for (EngineTask& task : tasks) task(*kv_);
  kv_->PublishCatalog();
  PublishStats();
}

void Engine::DrainInbox() {
  std::vector<Incoming> incoming;
  std::vector<RequestId> cancels;
  std::vector<std::pair<RequestId, Registration>> registrations;
  std::vector<Deletion> deletions;
  std::vector<EngineTask> tasks;
  {
    absl::MutexLock lock(&mu_);
    incoming.swap(inbox_);
    cancels.swap(cancels_);
    registrations.swap(registrations_);
    deletions.swap(deletions_);
    tasks.swap(tasks_);
  }
  for (Deletion& deletion : deletions) ApplyDeletion(std::move(deletion));
  // Before new requests, so that a turn sent after a session call's reply sees its effect.
  for (EngineTask& task : tasks) task(*kv_);
  for (auto& [id, registration] : registrations) AddRegistration(id, std::move(registration));
  for (Incoming& in : incoming) AddRequest(std::move(in));
  for (RequestId id : cancels) {
    auto it = live_.find(id);
    if (it == live_.end() || it->second->is_registration()) continue;
    scheduler_->Abort(id);
    Fail(id, absl::CancelledError("the client cancelled the request"));
  }
}

void Engine::AddRequest(Incoming in) {
  const RequestId id = in.id;
  auto live = std::make_unique<Live>();
  live->request = std::move(in.request);
  live->sink = std::move(in.sink);
  live->tokens = live->request.prompt_ids;
  live->stop = StopStringMatcher(live->request.stop_strings);
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
  sequence.session = r.session;
  sequence.session_append = r.session_append;
  sequence.first_turn_prompt = r.first_turn_ids;
  live->request.prefix_snapshot = nullptr;  // the manager holds it while the request waits
  const int64_t max_new = r.max_new_tokens;
  Live& added_live = *live;
  live_.emplace(id, std::move(live));
  absl::Status added = kv_->Add(id, std::move(sequence));
  if (added.ok()) {
    // A session turn's prompt has the session's history in front.
    if (!added_live.request.session.empty()) {
      added_live.request.prompt_ids = kv_->prompt(id);
      added_live.tokens = added_live.request.prompt_ids;
    }
    const int64_t num_prompt = static_cast<int64_t>(added_live.request.prompt_ids.size());
    added = scheduler_->Add(id, num_prompt, max_new, /*num_cached_tokens=*/0,
                            kv_->prefill_whole(id) ? PrefillMode::kWhole : PrefillMode::kChunked,
                            RowsOf(added_live.request), added_live.request.tenant);
  }
  if (!added.ok()) Fail(id, added);
}

void Engine::AddRegistration(RequestId id, Registration registration) {
  auto live = std::make_unique<Live>();
  live->registration_done = std::move(registration.done);
  live->tokens = registration.token_ids;
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
    added = scheduler_->Add(id, num_prompt, /*max_new_tokens=*/1, /*num_cached_tokens=*/0,
                            kv_->prefill_whole(id) ? PrefillMode::kWhole : PrefillMode::kChunked);
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
    if (live.multi_row()) {
      EndRows(live, FinishReason::kCancelled);
      Finish(id, FinishReason::kCancelled);
      continue;
    }
    std::string text;
    if (live.detokenizer) text = live.stop.Feed(live.detokenizer->Finish());
    text += live.stop.Flush();
    if (!text.empty()) {
      SequenceOutput output;
      output.text = text;
      live.sink->OnOutput(output);
    }
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
  if (live.is_registration()) return true;
  metrics_->ObserveQueueTime(absl::ToDoubleSeconds(now - live.request.arrival_time));
  metrics_->AddPromptTokens(static_cast<int64_t>(live.request.prompt_ids.size()),
                            live.num_cached_tokens);
  absl::Status sampling = live.request.sampling.Validate();
  if (!sampling.ok()) {
    Fail(id, absl::InvalidArgumentError(absl::StrCat("sampling: ", sampling.message())));
    return false;
  }
  const GenerationRequest& r = live.request;
  if (r.num_beams > 1) {
    model::BeamSearchOptions options{.num_beams = r.num_beams,
                                     .num_return_sequences = r.num_return_sequences,
                                     .early_stopping = r.early_stopping,
                                     .length_penalty = r.length_penalty,
                                     .max_new_tokens = r.max_new_tokens,
                                     .end_token_ids = r.stop_token_ids,
                                     .repetition_penalty = r.sampling.repetition_penalty,
                                     .top_logprobs = r.top_logprobs};
    if (!r.ignore_eos) {
      for (int32_t eos : model_->info().eos_token_ids) {
        if (std::find(options.end_token_ids.begin(), options.end_token_ids.end(), eos) ==
            options.end_token_ids.end()) {
          options.end_token_ids.push_back(eos);
        }
      }
    }
    if (absl::Status valid = options.Validate(); !valid.ok()) {
      Fail(id, absl::InvalidArgumentError(absl::StrCat("sampling: ", valid.message())));
      return false;
    }
    live.beams = std::make_unique<model::BeamSearch>(std::move(options), r.prompt_ids);
    return true;
  }
  if (r.num_return_sequences > 1) {
    live.samples.resize(r.num_return_sequences);
    for (int i = 0; i < r.num_return_sequences; ++i) {
      Live::Sample& sample = live.samples[i];
      model::SamplingParams params = r.sampling;
      params.seed = r.sampling.seed + static_cast<uint64_t>(i);
      sample.sampler = std::make_unique<model::Sampler>(params);
      sample.stop = StopStringMatcher(r.stop_strings);
      sample.context = r.prompt_ids;
      if (tokenizer_ != nullptr) {
        sample.detokenizer = std::make_unique<model::IncrementalDetokenizer>(
            tokenizer_, /*skip_special_tokens=*/true);
      }
    }
    return true;
  }
  live.sampler = std::make_unique<model::Sampler>(live.request.sampling);
  if (tokenizer_ != nullptr) {
    live.detokenizer =
        std::make_unique<model::IncrementalDetokenizer>(tokenizer_, /*skip_special_tokens=*/true);
  }
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
      Live& live = *live_.at(s.id);
      model::SequenceInput input;
      cache::KvCache* cache = kv_->cache(s.id);
      if (cache == nullptr) {
        // Without a cache a sequence is recomputed whole whenever it samples.
        if (!s.samples) continue;
        input.token_ids = live.tokens;
      } else if (live.multi_row() && !s.is_prefill && live.num_generated > 0) {
        // One token per row: beams or samples of one request, in one cache.
        KVSERVE_DCHECK(static_cast<int64_t>(live.row_tokens.size()) == live.rows &&
                       s.rows == live.rows)
            << "request " << s.id << ": " << live.rows << " rows, scheduled " << s.rows;
        input.token_ids = live.row_tokens;
        input.rows = live.rows;
        input.cache = cache;
        with_cache.push_back(s.id);
      } else {
        input.token_ids =
            absl::Span<const int32_t>(live.tokens).subspan(s.start_position, s.num_tokens);
        input.cache = cache;
        with_cache.push_back(s.id);
      }
      result.batch_index[i] = static_cast<int>(batch.sequences.size());
      batch.sequences.push_back(input);
    }
    kv_->BeginStep(with_cache);
  };
  build_batch();
  while (!batch.sequences.empty()) {
    try {
      result.output = model_->Forward(batch);
      kv_->CommitStep(with_cache);
      return result;
    } catch (const compat::OutOfMemoryError& e) {
      // Out of device memory (CUDA's allocator or the KV budget): take the step back, free
      // memory and run the step again; only when nothing is left to move does the largest
      // sequence of the step fail, alone.
      ++num_oom_events_;
      metrics_->CountOutOfMemory();
      spdlog::warn("step out of memory: {}", std::string(e.what_without_backtrace()));
      for (RequestId broken : kv_->RollbackStep(with_cache)) {
        for (size_t i = 0; i < n; ++i) {
          if (plan.sequences[i].id != broken || ended[i]) continue;
          Fail(broken, absl::InternalError("a step could not be rolled back after running "
                                           "out of memory"));
          ended[i] = true;
        }
      }
      const cache::OutOfMemoryAction action = kv_->OnOutOfMemory(with_cache);
      if (action.offloaded) {
        metrics_->CountOffloadFallback();
        spdlog::warn("out of KV memory: a request's cache ({} device bytes) moved to the host",
                     action.offloaded_bytes);
      } else if (action.victim) {
        for (size_t i = 0; i < n; ++i) {
          if (plan.sequences[i].id != *action.victim || ended[i]) continue;
          Fail(*action.victim, absl::ResourceExhaustedError(
                                   absl::StrCat(action.reason, ": ", e.what_without_backtrace())));
          ended[i] = true;
        }
      } else if (!action.reclaimed_snapshots && !action.offloaded_idle_sessions) {
        result.output = absl::ResourceExhaustedError(
            absl::StrCat("out of memory with nothing left to free: ", e.what_without_backtrace()));
        return result;
      }
      build_batch();
    } catch (const c10::Error& e) {
      (void)kv_->RollbackStep(with_cache);
      result.output =
          absl::InternalError(absl::StrCat("forward failed: ", e.what_without_backtrace()));
      return result;
    } catch (const std::exception& e) {
      (void)kv_->RollbackStep(with_cache);
      result.output = absl::InternalError(absl::StrCat("forward failed: ", e.what()));
      return result;
    }
  }
  return result;
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
      CompleteRegistration(s.id);
      results.push_back({s.id, true});
      continue;
    }
    const at::Tensor& logits = forward.output->logits[forward.batch_index[i]];
    if (live.multi_row()) {
      // Its prompt is kept before its one row becomes several.
      if (s.is_prefill) kv_->OnPrefilled(s.id);
      absl::StatusOr<std::optional<FinishReason>> reason = StepRows(s.id, live, logits, now);
      if (!reason.ok()) {
        Fail(s.id, reason.status());
        results.push_back({s.id, true});
        continue;
      }
      if (*reason) finished.emplace_back(s.id, **reason);
      results.push_back({s.id, reason->has_value()});
      continue;
    }
    if (s.is_prefill) prefilled.push_back(s.id);
    const int32_t token = live.sampler->Sample(logits, live.tokens);
    std::optional<FinishReason> reason = AcceptToken(live, token, now, logits);
    if (reason) finished.emplace_back(s.id, *reason);
    results.push_back({s.id, reason.has_value()});
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

void Engine::NoteStep(Live& live, int64_t tokens, absl::Time now) {
  ++live.num_generated;
  if (live.num_generated == 1) {
    live.first_token_at = now;
    metrics_->ObserveTimeToFirstToken(absl::ToDoubleSeconds(now - live.request.arrival_time));
  } else {
    metrics_->ObserveInterTokenLatency(absl::ToDoubleSeconds(now - live.last_token_at));
  }
  live.last_token_at = now;
  metrics_->AddGeneratedTokens(tokens);
}

std::optional<FinishReason> Engine::EndAfter(const GenerationRequest& r, int32_t token,
                                             int64_t num_generated, bool stop_matched) const {
  const std::vector<int32_t>& eos = model_->info().eos_token_ids;
  if (stop_matched) return FinishReason::kStop;
  if (!r.ignore_eos && std::find(eos.begin(), eos.end(), token) != eos.end()) {
    return FinishReason::kEos;
  }
  if (std::find(r.stop_token_ids.begin(), r.stop_token_ids.end(), token) !=
      r.stop_token_ids.end()) {
    return FinishReason::kStop;
  }
  if (num_generated >= r.max_new_tokens) return FinishReason::kLength;
  return std::nullopt;
}

std::string Engine::TextOf(model::IncrementalDetokenizer* detokenizer, StopStringMatcher& stop,
                           int32_t token, std::optional<FinishReason>* reason) const {
  std::string text = stop.Feed(detokenizer != nullptr ? detokenizer->Add(token) : "");
  if (stop.matched()) {
    *reason = FinishReason::kStop;
    return text;
  }
  if (*reason) {
    // The end of the stream: release what the detokenizer and the stop matcher held back.
    if (detokenizer != nullptr) text += stop.Feed(detokenizer->Finish());
    if (stop.matched()) *reason = FinishReason::kStop;
    text += stop.Flush();
  }
  return text;
}

std::vector<model::PositionLogprobs> Engine::LogprobsOf(Live& live, absl::Span<const float> row,
                                                        int32_t token) const {
  std::vector<model::PositionLogprobs> out;
  if (live.request.top_logprobs < 0) return out;
  model::LogSoftmax(row, &live.log_probs);
  out.push_back(model::LogprobsAt(live.log_probs, token, live.request.top_logprobs));
  return out;
}

std::optional<FinishReason> Engine::AcceptToken(Live& live, int32_t token, absl::Time now,
                                                const at::Tensor& logits) {
  live.tokens.push_back(token);
  NoteStep(live, 1, now);
  const GenerationRequest& r = live.request;
  std::optional<FinishReason> reason =
      EndAfter(r, token, live.num_generated, /*stop_matched=*/false);
  std::string text = TextOf(live.detokenizer.get(), live.stop, token, &reason);
  std::vector<model::PositionLogprobs> logprobs;
  if (r.top_logprobs >= 0) {
    at::Tensor holder;
    logprobs = LogprobsOf(live, FloatRow(logits, &holder), token);
  }
  const int32_t ids[1] = {token};
  SequenceOutput output;
  output.text = text;
  output.token_ids = ids;
  output.logprobs = logprobs;
  live.sink->OnOutput(output);
  return reason;
}

absl::StatusOr<std::optional<FinishReason>> Engine::StepRows(RequestId id, Live& live,
                                                             const at::Tensor& logits,
                                                             absl::Time now) {
  const int64_t vocab = model_->info().vocab_size;
  at::Tensor holder;
  const absl::Span<const float> all = FloatRow(logits, &holder);
  const int64_t rows = static_cast<int64_t>(all.size()) / vocab;
  if (rows != live.rows || rows * vocab != static_cast<int64_t>(all.size())) {
    return absl::InternalError(absl::StrCat("the step returned ", all.size(), " logits for ",
                                            live.rows, " rows of ", vocab));
  }
  const bool first = live.num_generated == 0;
  if (live.beams != nullptr) {
    model::BeamSearch::Step step;
    if (absl::Status s = live.beams->Advance(all, vocab, &step); !s.ok()) {
      return absl::InternalError(absl::StrCat("beam search: ", s.message()));
    }
    NoteStep(live, rows, now);
    if (step.done) {
      return EndRows(live, FinishReason::kLength);
    }
    // The first step's beams all continue the prompt: its row, repeated.
    absl::Status moved =
        first ? kv_->ExpandRows(id, live.request.num_beams) : kv_->SelectRows(id, step.parents);
    if (!moved.ok()) return absl::InternalError(absl::StrCat("beam rows: ", moved.message()));
    live.rows = live.request.num_beams;
    live.row_tokens = std::move(step.tokens);
    return std::optional<FinishReason>();
  }

  // Independent samples: the first step draws every sample from the prompt's one row.
  const int64_t drawn = first ? static_cast<int64_t>(live.samples.size()) : rows;
  if (first) {
    live.row_sample.resize(live.samples.size());
    for (size_t i = 0; i < live.samples.size(); ++i) live.row_sample[i] = static_cast<int>(i);
  }
  NoteStep(live, drawn, now);
  std::vector<int64_t> keep;  // rows (after the first step's expansion) still running
  for (int64_t r = 0; r < drawn; ++r) {
    const absl::Span<const float> row = first ? all : all.subspan(r * vocab, vocab);
    const int index = live.row_sample[r];
    Live::Sample& sample = live.samples[index];
    const int32_t token = sample.sampler->Sample(row, sample.context);
    sample.context.push_back(token);
    ++sample.num_generated;
    ++live.completion_tokens;
    std::optional<FinishReason> reason =
        EndAfter(live.request, token, sample.num_generated, /*stop_matched=*/false);
    std::string text = TextOf(sample.detokenizer.get(), sample.stop, token, &reason);
    const std::vector<model::PositionLogprobs> logprobs = LogprobsOf(live, row, token);
    sample.finish = reason;
    const int32_t ids[1] = {token};
    SequenceOutput output;
    output.index = index;
    output.text = text;
    output.token_ids = ids;
    output.logprobs = logprobs;
    output.finish = reason;
    live.sink->OnOutput(output);
    if (!reason) keep.push_back(r);
  }
  if (keep.empty()) return live.samples.front().finish;
  if (first) {
    if (absl::Status s = kv_->ExpandRows(id, drawn); !s.ok()) {
      return absl::InternalError(absl::StrCat("sample rows: ", s.message()));
    }
    live.rows = drawn;
  }
  if (static_cast<int64_t>(keep.size()) < live.rows) {
    // Finished samples leave the batch.
    if (absl::Status s = kv_->SelectRows(id, keep); !s.ok()) {
      return absl::InternalError(absl::StrCat("sample rows: ", s.message()));
    }
    std::vector<int> row_sample;
    for (int64_t r : keep) row_sample.push_back(live.row_sample[r]);
    live.row_sample = std::move(row_sample);
    live.rows = static_cast<int64_t>(keep.size());
    if (absl::Status s = scheduler_->SetRows(id, live.rows); !s.ok()) {
      return absl::InternalError(absl::StrCat("sample rows: ", s.message()));
    }
  }
  live.row_tokens.clear();
  for (int index : live.row_sample) live.row_tokens.push_back(live.samples[index].context.back());
  return std::optional<FinishReason>();
}

std::optional<FinishReason> Engine::EndRows(Live& live, FinishReason cut) {
  if (live.beams != nullptr) {
    // The best hypotheses, each sent whole with its score.
    std::vector<model::BeamHypothesis> best = live.beams->Finalize();
    const std::vector<int32_t>& eos = model_->info().eos_token_ids;
    std::optional<FinishReason> first;
    for (size_t j = 0; j < best.size(); ++j) {
      const model::BeamHypothesis& h = best[j];
      FinishReason reason = cut;
      if (h.ended) {
        const bool is_eos = !live.request.ignore_eos && !h.tokens.empty() &&
                            std::find(eos.begin(), eos.end(), h.tokens.back()) != eos.end();
        reason = is_eos ? FinishReason::kEos : FinishReason::kStop;
      }
      std::string text;
      if (tokenizer_ != nullptr) {
        model::IncrementalDetokenizer detokenizer(tokenizer_, /*skip_special_tokens=*/true);
        for (int32_t token : h.tokens) text += detokenizer.Add(token);
        text += detokenizer.Finish();
      }
      live.completion_tokens += static_cast<int64_t>(h.tokens.size());
      SequenceOutput output;
      output.index = static_cast<int>(j);
      output.text = text;
      output.token_ids = h.tokens;
      output.logprobs = h.logprobs;
      output.finish = reason;
      output.score = h.score;
      live.sink->OnOutput(output);
      if (!first) first = reason;
    }
    return first.value_or(cut);
  }
  // Samples still running end here with what they have.
  for (size_t i = 0; i < live.samples.size(); ++i) {
    Live::Sample& sample = live.samples[i];
    if (sample.finish) continue;
    std::string text;
    if (sample.detokenizer) text = sample.stop.Feed(sample.detokenizer->Finish());
    text += sample.stop.Flush();
    sample.finish = cut;
    SequenceOutput output;
    output.index = static_cast<int>(i);
    output.text = text;
    output.finish = cut;
    live.sink->OnOutput(output);
  }
  return live.samples.empty() ? cut : *live.samples.front().finish;
}

void Engine::Finish(RequestId id, FinishReason reason) {
  Live& live = *live_.at(id);
  GenerationSummary summary;
  summary.finish_reason = reason;
  summary.prompt_tokens = static_cast<int64_t>(live.request.prompt_ids.size());
  summary.cached_tokens = live.num_cached_tokens;
  summary.completion_tokens = live.multi_row() ? live.completion_tokens : live.num_generated;
  summary.num_sequences = live.request.num_return_sequences;
  const absl::Time arrival = live.request.arrival_time;
  summary.queue_ms = live.admitted ? Ms(live.admitted_at - arrival) : 0;
  if (live.num_generated > 0) {
    summary.ttft_ms = Ms(live.first_token_at - arrival);
    summary.decode_ms = Ms(live.last_token_at - live.first_token_at);
  }
  summary.cache_implementation =
      live.request.cache_spec.use_cache() ? kv_->strategy_name(id) : "none";
  summary.offload_fallback = kv_->offload_fallback(id);
  summary.prefix = std::string(cache::SplitQualifiedPrefixName(live.prefix_name).second);
  summary.session = live.request.session;
  summary.session_recompute_reason = live.session_recompute_reason;
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
  kv_->Release(id, it->second->tokens, keep_session_cache);
  live_.erase(it);
}

void Engine::PublishStats() {
  const cache::KvCacheManagerStats kv = kv_->Stats();
  std::map<std::pair<std::string, std::string>, int64_t> by_strategy;
  const std::string device = model_->info().device.str();
  for (const auto& [strategy, usage] : kv.by_strategy) {
    by_strategy[{strategy, device}] += usage.device_bytes;
    by_strategy[{strategy, "host"}] += usage.host_bytes;
  }
  metrics_->SetKvBytes(by_strategy);
  metrics_->SetKvDeviceBudget(kv.budget_used, kv.budget_limit);
  const cache::SessionStats& sessions = kv.sessions;
  metrics_->SetSessionCounts({.live = sessions.live,
                              .offloaded = sessions.offloaded,
                              .device_bytes = sessions.memory.device_bytes,
                              .host_bytes = sessions.memory.host_bytes,
                              .evictions = sessions.evictions,
                              .expirations = sessions.expirations,
                              .hits = sessions.hits,
                              .misses = sessions.misses});
  const cache::PrefixStoreStats& p = kv.prefixes;
  metrics_->SetPrefixCounts({.named_hits = p.named_hits,
                             .named_misses = p.named_misses,
                             .automatic_hits = p.automatic_hits,
                             .automatic_misses = p.automatic_misses,
                             .evictions = p.evictions,
                             .expirations = p.expirations,
                             .bytes = p.bytes_used,
                             .named_entries = p.named_entries,
                             .automatic_entries = p.automatic_entries});
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
