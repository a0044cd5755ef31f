// Engine: the continuous-batching loop on its own thread.
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
#include "cache/cache_factory.h"
#include "cache/dynamic_layer.h"
#include "cache/kv_buffer.h"
#include "cache/kv_cache.h"
#include "cache/prefix_store.h"
#include "cache/snapshot.h"
#include "cache/torch_compat.h"
#include "model/incremental_detokenizer.h"
#include "model/model.h"
#include "model/sampler.h"
#include "model/tokenizer.h"
#include "server/metrics.h"
#include "server/stop_string_matcher.h"

namespace kvserve::server {
namespace {

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength:
      return "length";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kEos:
      return "eos";
    case FinishReason::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

// "resource_exhausted", "deadline_exceeded", ...: a failed request's outcome label.
std::string OutcomeLabel(const absl::Status& status) {
  return absl::AsciiStrToLower(absl::StatusCodeToString(status.code()));
}

double Ms(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }

// Upper bounds of the device bytes a request's cache needs, from the model's shape (quantized
// caches need less; counting them unquantized keeps admission on the safe side).
struct KvEstimate {
  int64_t total_bytes = 0;               // every layer on the device
  int64_t offloaded_resident_bytes = 0;  // offloaded: about two layers resident at a time
};

KvEstimate EstimateKv(const model::ModelInfo& info, int64_t tokens) {
  // Dynamic storage grows in whole granules.
  tokens = (tokens + cache::KvBuffer::kGranuleTokens - 1) / cache::KvBuffer::kGranuleTokens *
           cache::KvBuffer::kGranuleTokens;
  const int64_t per_token =
      2 * info.num_kv_heads * info.head_dim * static_cast<int64_t>(c10::elementSize(info.dtype));
  KvEstimate estimate;
  int64_t largest_layer = 0;
  for (const cache::LayerSpec& layer : info.layer_specs) {
    const int64_t held = layer.is_sliding() ? std::min(tokens, layer.window) : tokens;
    estimate.total_bytes += held * per_token;
    largest_layer = std::max(largest_layer, held * per_token);
  }
  estimate.offloaded_resident_bytes = 2 * largest_layer;
  return estimate;
}

absl::Status CannotFit(const KvEstimate& estimate, int64_t limit) {
  return absl::ResourceExhaustedError(absl::StrCat(
      "the request's KV cache needs ", estimate.offloaded_resident_bytes,
      " device bytes even offloaded (", estimate.total_bytes,
      " on the device), above the KV device budget of ", limit, " bytes (--kv-device-bytes)"));
}

// Admission by KV memory: a request is admitted when its cache fits beside the running ones,
// or when it would fit offloaded (the out-of-memory fallback then offloads it); admission
// pauses while the budget is exceeded; a request that cannot fit even offloaded is refused.
class KvAdmissionPolicy final : public AdmissionPolicy {
 public:
  KvAdmissionPolicy(const model::ModelInfo* info, const cache::KvMemoryBudget* budget)
      : info_(info), budget_(budget) {}

  Decision Admit(const AdmissionQuery& query) override {
    const int64_t limit = budget_->limit();
    if (limit < 0) return Decision::kAdmit;
    const KvEstimate estimate = EstimateKv(*info_, query.max_cache_tokens());
    if (estimate.offloaded_resident_bytes > limit) return Decision::kReject;
    if (budget_->used() > limit) return Decision::kDefer;
    if (budget_->available() >= estimate.total_bytes) return Decision::kAdmit;
    return budget_->available() >= estimate.offloaded_resident_bytes ? Decision::kAdmit
                                                                     : Decision::kDefer;
  }

 private:
  const model::ModelInfo* info_;
  const cache::KvMemoryBudget* budget_;
};

}  // namespace

struct Engine::Registration {
  std::string name;
  std::vector<int32_t> token_ids;
  cache::NamedPrefixOptions options;
  RegisterCallback done;
};

struct Engine::PrefixChoice {
  std::shared_ptr<const cache::Snapshot> snapshot;  // null: nothing to copy
  int64_t num_tokens = 0;                           // tokens of it to copy
  std::string name;                                 // the registered prefix's name, if named
};

struct Engine::Live {
  GenerationRequest request;
  // The cached prefix to copy into the cache at admission (released once copied).
  PrefixChoice prefix;
  int64_t num_cached_tokens = 0;
  // The cache was converted to its offloaded form after an out-of-memory error.
  bool offload_fallback = false;
  std::shared_ptr<RequestSink> sink;
  std::unique_ptr<cache::KvCache> cache;  // null without a cache (use_cache=false)
  std::unique_ptr<model::Sampler> sampler;
  std::unique_ptr<model::IncrementalDetokenizer> detokenizer;  // null without a tokenizer
  StopStringMatcher stop;
  std::vector<int32_t> tokens;  // prompt, then every generated token
  int64_t num_generated = 0;
  bool admitted = false;
  absl::Time admitted_at;
  absl::Time first_token_at;
  absl::Time last_token_at;
};

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const EngineOptions& options,
                                                       model::Model* model,
                                                       const model::Tokenizer* tokenizer,
                                                       ServerMetrics* metrics,
                                                       cache::PrefixStore* prefix_store) {
  if (model == nullptr || metrics == nullptr) {
    return absl::InvalidArgumentError("Engine::Create: model and metrics are required");
  }
  if (options.auto_prefix_min_tokens < 1) {
    return absl::InvalidArgumentError("--auto-prefix-min-tokens must be >= 1");
  }
  if (options.idle_poll <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("idle_poll must be > 0");
  }
  if (!(options.kv_budget.fault_inject_oom_rate >= 0 &&
        options.kv_budget.fault_inject_oom_rate <= 1)) {
    return absl::InvalidArgumentError("--fault-inject-oom-rate must be in [0, 1]");
  }
  auto budget = std::make_unique<cache::KvMemoryBudget>(options.kv_budget);
  absl::StatusOr<std::unique_ptr<Scheduler>> scheduler = Scheduler::Create(
      options.scheduler, std::make_unique<KvAdmissionPolicy>(&model->info(), budget.get()));
  if (!scheduler.ok()) return scheduler.status();
  std::unique_ptr<Engine> engine(new Engine(options, model, tokenizer, metrics, prefix_store,
                                            std::move(budget), *std::move(scheduler)));
  engine->thread_ = std::thread([e = engine.get()] { e->Loop(); });
  return engine;
}

Engine::Engine(const EngineOptions& options, model::Model* model, const model::Tokenizer* tokenizer,
               ServerMetrics* metrics, cache::PrefixStore* prefix_store,
               std::unique_ptr<cache::KvMemoryBudget> budget, std::unique_ptr<Scheduler> scheduler)
    : options_(options),
      model_(model),
      tokenizer_(tokenizer),
      metrics_(metrics),
      prefix_store_(prefix_store),
      budget_(std::move(budget)),
      scheduler_(std::move(scheduler)) {
  for (const cache::LayerSpec& spec : model_->info().layer_specs) {
    if (spec.is_sliding()) allow_partial_prefix_ = false;
  }
}

Engine::~Engine() { Shutdown(absl::ZeroDuration()); }

absl::StatusOr<RequestId> Engine::Submit(GenerationRequest request,
                                         std::shared_ptr<RequestSink> sink) {
  const int64_t limit = options_.kv_budget.device_limit_bytes;
  if (limit >= 0 && request.cache_spec.use_cache()) {
    const KvEstimate estimate =
        EstimateKv(model_->info(),
                   static_cast<int64_t>(request.prompt_ids.size()) + request.max_new_tokens - 1);
    if (estimate.offloaded_resident_bytes > limit) {
      metrics_->CountRequest("resource_exhausted");
      return CannotFit(estimate, limit);
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
                            const cache::NamedPrefixOptions& options, RegisterCallback done) {
  auto registration = std::make_unique<Registration>();
  registration->name = std::move(name);
  registration->token_ids = std::move(token_ids);
  registration->options = options;
  registration->done = std::move(done);
  {
    absl::MutexLock lock(&mu_);
    if (!draining_) {
      registrations_.push_back(std::move(registration));
      return;
    }
  }
  registration->done(absl::UnavailableError("the server is shutting down"));
}

void Engine::RunRegistration(Registration& r) {
  if (prefix_store_ == nullptr) {
    r.done(absl::FailedPreconditionError("this server has no prefix cache"));
    return;
  }
  // The capture cache holds every token in every layer (plain dynamic layers even where the
  // model slides: the masks come from the model's layer specs), so the snapshot can be
  // loaded into a cache of any strategy.
  std::vector<std::unique_ptr<cache::CacheLayer>> layers;
  for (int64_t i = 0; i < model_->info().num_layers; ++i) {
    layers.push_back(std::make_unique<cache::DynamicLayer>());
  }
  cache::KvCache capture(std::move(layers));
  model::Batch batch;
  batch.sequences.push_back({r.token_ids, &capture, false});
  absl::Status status;
  try {
    absl::StatusOr<model::ForwardOutput> out = model_->Forward(batch);
    status = out.status();
  } catch (const c10::Error& e) {
    status = absl::InternalError(absl::StrCat("prefill failed: ", e.what_without_backtrace()));
  }
  if (!status.ok()) {
    r.done(status);
    return;
  }
  absl::StatusOr<std::shared_ptr<const cache::Snapshot>> snapshot =
      cache::Snapshot::Capture(capture, r.token_ids, options_.model_fingerprint);
  if (!snapshot.ok()) {
    r.done(snapshot.status());
    return;
  }
  r.done(prefix_store_->PutNamed(r.name, *std::move(snapshot), r.options));
}

Engine::PrefixChoice Engine::ChoosePrefix(const GenerationRequest& request) {
  PrefixChoice choice;
  const int64_t prompt = static_cast<int64_t>(request.prompt_ids.size());
  if (prefix_store_ == nullptr || request.skip_prefix_reuse || !request.cache_spec.use_cache()) {
    return choice;
  }
  if (request.prefix_snapshot != nullptr) {
    choice.snapshot = request.prefix_snapshot;
    // The last prompt token is always computed: its logits choose the first new token.
    choice.num_tokens = std::min(request.prefix_snapshot->num_tokens(), prompt - 1);
    choice.name = request.prefix;
  }
  if (options_.auto_prefix_cache) {
    cache::PrefixMatch match = prefix_store_->Lookup(
        request.prompt_ids, options_.auto_prefix_min_tokens, allow_partial_prefix_);
    if (!match.empty() && match.num_tokens > choice.num_tokens) {
      choice.snapshot = std::move(match.snapshot);
      choice.num_tokens = match.num_tokens;
      choice.name = match.named ? match.name : "";
    }
  }
  if (choice.num_tokens < 1) choice = PrefixChoice();
  return choice;
}

absl::Status Engine::LoadPrefix(Live& live) {
  // A deep copy: the request's cache shares nothing with the snapshot.
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      absl::Status loaded =
          live.prefix.snapshot->LoadInto(live.cache.get(), live.prefix.num_tokens);
      if (!loaded.ok()) {
        return absl::InternalError(absl::StrCat("copying the cached prefix: ", loaded.message()));
      }
      return absl::OkStatus();
    } catch (const compat::OutOfMemoryError& e) {
      ++num_oom_events_;
      metrics_->CountOutOfMemory();
      live.cache->Reset();
      compat::EmptyDeviceCache();
      if (attempt == 0) {
        live.cache->ConvertToOffloaded();
        live.offload_fallback = true;
        ++num_offload_fallbacks_;
        metrics_->CountOffloadFallback();
      }
    }
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("the cached prefix (", live.prefix.num_tokens,
                   " tokens) does not fit in the KV device budget even offloaded; budget ",
                   budget_->limit(), " bytes, in use ", budget_->used()));
}

bool Engine::OffloadLargestCache() {
  // The largest by what its cache holds on the device now or, for caches still empty (a
  // failed first step was rolled back), by what it will hold.
  Live* largest = nullptr;
  int64_t largest_bytes = -1;
  for (auto& [id, live] : live_) {
    if (live->cache == nullptr || live->cache->fully_offloaded()) continue;
    const GenerationRequest& r = live->request;
    const int64_t bytes = std::max(
        live->cache->Memory().device_bytes,
        EstimateKv(model_->info(), static_cast<int64_t>(r.prompt_ids.size()) + r.max_new_tokens - 1)
            .total_bytes);
    if (bytes > largest_bytes) {
      largest = live.get();
      largest_bytes = bytes;
    }
  }
  if (largest == nullptr) return false;
  largest->cache->ConvertToOffloaded();
  largest->offload_fallback = true;
  ++num_offload_fallbacks_;
  metrics_->CountOffloadFallback();
  spdlog::warn("out of KV memory: a request's cache ({} device bytes) moved to the host",
               largest_bytes);
  return true;
}

void Engine::KeepAutomaticPrefix(const Live& live) {
  const GenerationRequest& r = live.request;
  if (prefix_store_ == nullptr || !options_.auto_prefix_cache || r.skip_prefix_reuse ||
      live.cache == nullptr || !allow_partial_prefix_ ||
      r.cache_spec.implementation != cache::CacheImplementation::kDynamic ||
      static_cast<int64_t>(r.prompt_ids.size()) < options_.auto_prefix_min_tokens) {
    return;
  }
  absl::StatusOr<std::shared_ptr<const cache::Snapshot>> snapshot =
      cache::Snapshot::Capture(*live.cache, r.prompt_ids, options_.model_fingerprint);
  if (snapshot.ok()) prefix_store_->PutAutomatic(*std::move(snapshot));
}

void Engine::Shutdown(absl::Duration grace) {
  absl::MutexLock shutdown_lock(&shutdown_mu_);
  {
    absl::MutexLock lock(&mu_);
    const absl::Time deadline = absl::Now() + grace;
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
    const absl::Time now = absl::Now();
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
    PublishStats();
    if (!ran) {
      absl::MutexLock lock(&mu_);
      auto has_work = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return !inbox_.empty() || !cancels_.empty();
      };
      mu_.AwaitWithTimeout(absl::Condition(&has_work), options_.idle_poll);
    }
  }
  // Registrations that arrived after the last drain: the engine no longer runs them.
  std::vector<std::unique_ptr<Registration>> late;
  {
    absl::MutexLock lock(&mu_);
    late.swap(registrations_);
  }
  for (auto& registration : late) {
    registration->done(absl::UnavailableError("the server is shutting down"));
  }
  PublishStats();
}

void Engine::DrainInbox() {
  std::vector<Incoming> incoming;
  std::vector<RequestId> cancels;
  std::vector<std::unique_ptr<Registration>> registrations;
  {
    absl::MutexLock lock(&mu_);
    incoming.swap(inbox_);
    cancels.swap(cancels_);
    registrations.swap(registrations_);
  }
  for (std::unique_ptr<Registration>& registration : registrations) {
    RunRegistration(*registration);
  }
  for (Incoming& in : incoming) {
    auto live = std::make_unique<Live>();
    live->request = std::move(in.request);
    live->sink = std::move(in.sink);
    live->tokens = live->request.prompt_ids;
    live->stop = StopStringMatcher(live->request.stop_strings);
    const int64_t num_prompt = static_cast<int64_t>(live->tokens.size());
    const int64_t max_new = live->request.max_new_tokens;
    live->prefix = ChoosePrefix(live->request);
    live->request.prefix_snapshot = nullptr;  // the choice holds what is copied
    live->num_cached_tokens = live->prefix.num_tokens;
    const int64_t num_cached = live->num_cached_tokens;
    live_.emplace(in.id, std::move(live));
    // A quantized cache's contents depend on how its updates are split, so its prompt runs
    // in one update, as in the reference, whatever else is running.
    const PrefillMode prefill =
        live_.at(in.id)->request.cache_spec.implementation == cache::CacheImplementation::kQuantized
            ? PrefillMode::kWhole
            : PrefillMode::kChunked;
    absl::Status added = scheduler_->Add(in.id, num_prompt, max_new, num_cached, prefill);
    if (!added.ok()) Fail(in.id, added);
  }
  for (RequestId id : cancels) {
    if (!live_.contains(id)) continue;
    scheduler_->Abort(id);
    Fail(id, absl::CancelledError("the client cancelled the request"));
  }
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
    std::string text;
    if (live.detokenizer) text = live.stop.Feed(live.detokenizer->Finish());
    text += live.stop.Flush();
    if (!text.empty()) live.sink->OnOutput(text, {});
    Finish(id, live, FinishReason::kCancelled);
  }
}

bool Engine::Admit(RequestId id, Live& live, absl::Time now) {
  live.admitted = true;
  live.admitted_at = now;
  {
    absl::MutexLock lock(&mu_);
    --num_queued_;
  }
  metrics_->ObserveQueueTime(absl::ToDoubleSeconds(now - live.request.arrival_time));
  metrics_->AddPromptTokens(static_cast<int64_t>(live.request.prompt_ids.size()),
                            live.num_cached_tokens);
  absl::Status sampling = live.request.sampling.Validate();
  if (!sampling.ok()) {
    Fail(id, absl::InvalidArgumentError(absl::StrCat("sampling: ", sampling.message())));
    return false;
  }
  absl::StatusOr<std::unique_ptr<cache::KvCache>> cache =
      cache::MakeCache(live.request.cache_spec, model_->info().layer_specs);
  if (!cache.ok()) {
    Fail(id, absl::InvalidArgumentError(absl::StrCat("cache: ", cache.status().message())));
    return false;
  }
  live.cache = *std::move(cache);
  if (live.cache != nullptr) live.cache->AttachBudget(budget_.get());
  if (live.prefix.snapshot != nullptr) {
    absl::Status loaded = LoadPrefix(live);
    live.prefix.snapshot = nullptr;
    if (!loaded.ok()) {
      Fail(id, loaded);
      return false;
    }
  }
  live.sampler = std::make_unique<model::Sampler>(live.request.sampling);
  if (tokenizer_ != nullptr) {
    live.detokenizer =
        std::make_unique<model::IncrementalDetokenizer>(tokenizer_, /*skip_special_tokens=*/true);
  }
  return true;
}

bool Engine::Step() {
  absl::StatusOr<StepPlan> plan = scheduler_->Schedule();
  if (!plan.ok()) {
    spdlog::error("scheduler: {}", std::string(plan.status().message()));
    return false;
  }
  for (RequestId id : plan->rejected) {
    const GenerationRequest& r = live_.at(id)->request;
    Fail(id, CannotFit(EstimateKv(model_->info(),
                                  static_cast<int64_t>(r.prompt_ids.size()) + r.max_new_tokens - 1),
                       budget_->limit()));
  }
  if (plan->empty()) return false;

  const absl::Time start = absl::Now();
  const size_t n = plan->sequences.size();
  constexpr size_t kNotRun = static_cast<size_t>(-1);
  std::vector<size_t> batch_index(n, kNotRun);
  std::vector<bool> ended(n, false);  // failed at admission or alone out of memory
  for (size_t i = 0; i < n; ++i) {
    const ScheduledSequence& s = plan->sequences[i];
    if (s.newly_admitted && !Admit(s.id, *live_.at(s.id), start)) ended[i] = true;
  }
  // The batch of the sequences still in the step (rebuilt when one fails alone).
  model::Batch batch;
  auto build_batch = [&] {
    batch.sequences.clear();
    std::fill(batch_index.begin(), batch_index.end(), kNotRun);
    for (size_t i = 0; i < n; ++i) {
      if (ended[i]) continue;
      const ScheduledSequence& s = plan->sequences[i];
      Live& live = *live_.at(s.id);
      model::SequenceInput input;
      if (live.cache == nullptr) {
        // Without a cache a sequence is recomputed whole whenever it samples.
        if (!s.samples) continue;
        input.token_ids = live.tokens;
      } else {
        input.token_ids =
            absl::Span<const int32_t>(live.tokens).subspan(s.start_position, s.num_tokens);
        input.cache = live.cache.get();
      }
      batch_index[i] = batch.sequences.size();
      batch.sequences.push_back(input);
    }
  };
  build_batch();
  for (const model::SequenceInput& input : batch.sequences) {
    if (input.cache != nullptr) input.cache->BeginStep();
  }

  absl::StatusOr<model::ForwardOutput> output = model::ForwardOutput{};
  while (!batch.sequences.empty()) {
    try {
      output = model_->Forward(batch);
      break;
    } catch (const compat::OutOfMemoryError& e) {
      // Out of device memory (CUDA's allocator or the KV budget): take the step back, move
      // the largest cache to the host and run the step again. Only when nothing is left to
      // move does the largest request of the step fail, alone.
      ++num_oom_events_;
      metrics_->CountOutOfMemory();
      spdlog::warn("step out of memory: {}", std::string(e.what_without_backtrace()));
      for (size_t i = 0; i < n; ++i) {
        if (ended[i] || batch_index[i] == kNotRun) continue;
        const ScheduledSequence& s = plan->sequences[i];
        Live& live = *live_.at(s.id);
        if (live.cache == nullptr) continue;
        if (absl::Status rolled = live.cache->RollbackStep(); !rolled.ok()) {
          Fail(s.id, rolled);
          ended[i] = true;
        }
      }
      compat::EmptyDeviceCache();
      if (!OffloadLargestCache()) {
        size_t victim = kNotRun;
        int64_t victim_bytes = -1;
        for (size_t i = 0; i < n; ++i) {
          if (ended[i] || batch_index[i] == kNotRun) continue;
          const Live& live = *live_.at(plan->sequences[i].id);
          const int64_t bytes = live.cache ? live.cache->Memory().total() : 0;
          if (bytes > victim_bytes) {
            victim = i;
            victim_bytes = bytes;
          }
        }
        if (victim == kNotRun) break;

        Fail(plan->sequences[victim].id,
             absl::ResourceExhaustedError(absl::StrCat(
                 "out of KV memory even with every cache offloaded: this request holds ",
                 victim_bytes, " bytes of KV and its step needed more (budget ", budget_->limit(),
                 " bytes, in use ", budget_->used(), "): ", e.what_without_backtrace())));
        ended[victim] = true;
      }
      build_batch();
      for (const model::SequenceInput& input : batch.sequences) {
        if (input.cache != nullptr) input.cache->BeginStep();
      }
    } catch (const c10::Error& e) {
      output = absl::InternalError(absl::StrCat("forward failed: ", e.what_without_backtrace()));
      break;
    } catch (const std::exception& e) {
      output = absl::InternalError(absl::StrCat("forward failed: ", e.what()));
      break;
    }
  }
  if (output.ok()) {
    for (const model::SequenceInput& input : batch.sequences) {
      if (input.cache != nullptr) input.cache->CommitStep();
    }
  }
  const absl::Time now = absl::Now();
  std::vector<SequenceResult> results;
  results.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const ScheduledSequence& s = plan->sequences[i];
    if (ended[i]) {
      results.push_back({s.id, true});
      continue;
    }
    if (!output.ok()) {
      // One failed forward leaves every cache of the batch with a partial step: the batch's
      // requests fail; others are untouched.
      spdlog::error("request {}: {}", s.id, std::string(output.status().message()));
      Fail(s.id, output.status());
      results.push_back({s.id, true});
      continue;
    }
    bool finished = false;
    if (s.samples) {
      Live& live = *live_.at(s.id);
      if (s.is_prefill) KeepAutomaticPrefix(live);
      const int32_t token = live.sampler->Sample(output->logits[batch_index[i]], live.tokens);
      finished = AcceptToken(s.id, live, token, now);
    }
    results.push_back({s.id, finished});
  }
  absl::Status updated = scheduler_->Update(results);
  if (!updated.ok()) spdlog::error("scheduler update: {}", std::string(updated.message()));
  absl::MutexLock lock(&mu_);
  ++stats_.num_steps;
  return true;
}

bool Engine::AcceptToken(RequestId id, Live& live, int32_t token, absl::Time now) {
  live.tokens.push_back(token);
  ++live.num_generated;
  if (live.num_generated == 1) {
    live.first_token_at = now;
    metrics_->ObserveTimeToFirstToken(absl::ToDoubleSeconds(now - live.request.arrival_time));
  } else {
    metrics_->ObserveInterTokenLatency(absl::ToDoubleSeconds(now - live.last_token_at));
  }
  live.last_token_at = now;
  metrics_->AddGeneratedTokens(1);

  std::string text = live.stop.Feed(live.detokenizer ? live.detokenizer->Add(token) : "");
  const GenerationRequest& r = live.request;
  const std::vector<int32_t>& eos = model_->info().eos_token_ids;
  std::optional<FinishReason> reason;
  if (live.stop.matched()) {
    reason = FinishReason::kStop;
  } else if (!r.ignore_eos && std::find(eos.begin(), eos.end(), token) != eos.end()) {
    reason = FinishReason::kEos;
  } else if (std::find(r.stop_token_ids.begin(), r.stop_token_ids.end(), token) !=
             r.stop_token_ids.end()) {
    reason = FinishReason::kStop;
  } else if (live.num_generated >= r.max_new_tokens) {
    reason = FinishReason::kLength;
  }
  if (reason && !live.stop.matched()) {
    // The end of the stream: release what the detokenizer and the stop matcher held back.
    if (live.detokenizer) text += live.stop.Feed(live.detokenizer->Finish());
    if (live.stop.matched()) reason = FinishReason::kStop;
    text += live.stop.Flush();
  }
  const int32_t ids[1] = {token};
  live.sink->OnOutput(text, ids);
  if (!reason) return false;
  Finish(id, live, *reason);
  return true;
}

void Engine::Finish(RequestId id, Live& live, FinishReason reason) {
  GenerationSummary summary;
  summary.finish_reason = reason;
  summary.prompt_tokens = static_cast<int64_t>(live.request.prompt_ids.size());
  summary.cached_tokens = live.num_cached_tokens;
  summary.completion_tokens = live.num_generated;
  const absl::Time arrival = live.request.arrival_time;
  summary.queue_ms = live.admitted ? Ms(live.admitted_at - arrival) : 0;
  if (live.num_generated > 0) {
    summary.ttft_ms = Ms(live.first_token_at - arrival);
    summary.decode_ms = Ms(live.last_token_at - live.first_token_at);
  }
  cache::CacheImplementation implementation = live.request.cache_spec.implementation;
  if (live.offload_fallback) {
    // The cache continued in its offloaded form.
    if (implementation == cache::CacheImplementation::kDynamic) {
      implementation = cache::CacheImplementation::kOffloaded;
    } else if (implementation == cache::CacheImplementation::kStatic) {
      implementation = cache::CacheImplementation::kOffloadedStatic;
    }
  }
  summary.cache_implementation = std::string(cache::CacheImplementationName(implementation));
  summary.offload_fallback = live.offload_fallback;
  summary.prefix = live.prefix.name;
  // Counted before the client hears of it, so that metrics read after a reply include it.
  metrics_->CountRequest(FinishReasonName(reason));
  live.sink->OnFinish(summary);
  {
    absl::MutexLock lock(&mu_);
    if (!live.admitted) --num_queued_;
    --num_live_;
  }
  live_.erase(id);
}

void Engine::Fail(RequestId id, const absl::Status& status) {
  auto it = live_.find(id);
  if (it == live_.end()) return;
  Live& live = *it->second;
  metrics_->CountRequest(OutcomeLabel(status));
  live.sink->OnError(status);
  {
    absl::MutexLock lock(&mu_);
    if (!live.admitted) --num_queued_;
    --num_live_;
  }
  live_.erase(it);
}

void Engine::PublishStats() {
  std::map<std::pair<std::string, std::string>, int64_t> by_strategy;
  const std::string device = model_->info().device.str();
  cache::MemoryUsage total;
  for (const auto& [id, live] : live_) {
    if (live->cache == nullptr) continue;
    const cache::MemoryUsage usage = live->cache->Memory();
    total += usage;
    const std::string strategy(
        cache::CacheImplementationName(live->request.cache_spec.implementation));
    by_strategy[{strategy, device}] += usage.device_bytes;
    by_strategy[{strategy, "host"}] += usage.host_bytes;
  }
  metrics_->SetKvBytes(by_strategy);
  if (prefix_store_ != nullptr) {
    const cache::PrefixStoreStats p = prefix_store_->stats();
    metrics_->SetPrefixCounts({.named_hits = p.named_hits,
                               .named_misses = p.named_misses,
                               .automatic_hits = p.automatic_hits,
                               .automatic_misses = p.automatic_misses,
                               .evictions = p.evictions,
                               .expirations = p.expirations,
                               .bytes = p.bytes_used,
                               .named_entries = p.named_entries,
                               .automatic_entries = p.automatic_entries});
  }
  metrics_->SetQueue(scheduler_->num_waiting(), scheduler_->num_running());
  absl::MutexLock lock(&mu_);
  stats_.num_waiting = num_queued_;
  stats_.num_running = num_live_ - num_queued_;
  stats_.kv_device_bytes = total.device_bytes;
  stats_.kv_host_bytes = total.host_bytes;
  stats_.num_oom_events = num_oom_events_;
  stats_.num_offload_fallbacks = num_offload_fallbacks_;
}

}  // namespace kvserve::server
