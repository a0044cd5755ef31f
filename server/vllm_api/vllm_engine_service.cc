// The vLLM engine protocol's service (see vllm_engine_service.h).
//
// Lifetimes: a Generate reactor is shared by gRPC (until OnDone) and the engine (until it drops
// the request's sink); a SubscribeKvEvents reactor by gRPC and the publisher's listener list
// (which holds it weakly through its Waker). Each side holds a reference.
#include "server/vllm_api/vllm_engine_service.h"

#include <atomic>
#include <chrono>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "server/engine.h"
#include "server/grpc_api/status_mapping.h"
#include "server/kv_event_publisher.h"
#include "server/metrics.h"
#include "spdlog/spdlog.h"

namespace kvserve::server::vllm_api {
namespace {

using grpc_api::CallerDenied;
using grpc_api::CallerOf;
using grpc_api::ToGrpcStatus;

absl::Status Unsupported(const std::string& field, const std::string& what) {
  return FieldError(field, absl::StrCat("not supported by kvserve (", what, ")"));
}

// A builder error's field path in the protocol's names.
absl::Status InProtocolNames(const absl::Status& status) {
  const std::string path = FieldPathOf(status);
  if (path.empty()) return status;
  std::string renamed = path;
  if (path.starts_with("token_ids.ids")) {
    renamed = absl::StrCat("tokenized.input_ids", path.substr(13));
  } else if (path == "prompt") {
    renamed = "text";
  } else if (path == "sampling.max_new_tokens") {
    renamed = "sampling_params.max_tokens";
  } else if (path.starts_with("sampling.")) {
    renamed = absl::StrCat("sampling_params.", path.substr(9));
  } else if (path.starts_with("constraint.")) {
    // The oneof's members sit in SamplingParams itself.
    renamed = absl::StrCat("sampling_params.", path.substr(11));
  }
  absl::string_view message = status.message();
  if (absl::StartsWith(message, path + ": ")) message.remove_prefix(path.size() + 2);
  return WithFieldPath(absl::Status(status.code(), absl::StrCat(renamed, ": ", message)), renamed);
}

std::string FinishName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength:
      return "length";
    case FinishReason::kStop:
    case FinishReason::kEos:
      return "stop";
    case FinishReason::kCancelled:
      return "abort";
  }
  return "stop";
}

// The client's deadline (wall-clock time), InfiniteFuture when it set none.
absl::Time ClientDeadline(const grpc::CallbackServerContext& context) {
  const auto deadline = context.deadline();
  if (deadline < std::chrono::system_clock::now() + std::chrono::hours(24 * 365 * 100)) {
    return absl::FromChrono(deadline);
  }
  return absl::InfiniteFuture();
}

void AddLogprobs(absl::Span<const model::PositionLogprobs> logprobs, vpb::OutputLogProbs* out) {
  for (const model::PositionLogprobs& p : logprobs) {
    out->add_token_logprobs(p.chosen.logprob);
    out->add_token_ids(static_cast<uint32_t>(p.chosen.token_id));
    vpb::TopLogProbs* top = out->add_top_logprobs();
    for (const model::TokenLogprob& t : p.top) {
      top->add_values(t.logprob);
      top->add_token_ids(static_cast<uint32_t>(t.token_id));
    }
  }
}

// ---- Generate ----

class GenerateCall;

class GenerateSink final : public RequestSink {
 public:
  explicit GenerateSink(GenerateCall* call);
  ~GenerateSink() override;
  void OnOutput(const SequenceOutput& output) override;
  void OnFinish(const GenerationSummary& summary) override;
  void OnError(const absl::Status& status) override;

 private:
  GenerateCall* const call_;
};

// One Generate: chunks (stream=true) while the engine decodes, then the complete message.
// At most one write is in flight; output that arrives meanwhile merges into the next chunk.
class GenerateCall final : public grpc::ServerWriteReactor<vpb::GenerateResponse> {
 public:
  GenerateCall(VllmEngineService* service, std::shared_ptr<grpc_api::CallRecord> record)
      : service_(service), record_(std::move(record)) {}

  void Start(grpc::CallbackServerContext* context, const vpb::GenerateRequest& request,
             const VllmServed* served) {
    Ref();
    request_id_ = request.request_id();
    stream_ = request.stream();
    absl::StatusOr<GenerationRequest> parsed = Parse(context, request, served);
    if (!parsed.ok()) {
      FinishWithError(ToGrpcStatus(parsed.status()));
      Unref();
      return;
    }
    engine_ = served->engine;
    prompt_tokens_ = static_cast<int64_t>(parsed->prompt_ids.size());
    if (record_ != nullptr) {
      record_->MarkCountedByEngine();
      record_->SetPromptTokens(prompt_tokens_);
    }
    absl::StatusOr<RequestId> id =
        engine_->Submit(*std::move(parsed), std::make_shared<GenerateSink>(this));
    if (!id.ok()) {
      FinishWithError(ToGrpcStatus(id.status()));
    } else {
      absl::MutexLock lock(&mu_);
      id_ = *id;
      if (!request_id_.empty() && !ended_) service_->Track(request_id_, *id);
      if (cancelled_) engine_->Cancel(*id);
    }
    Unref();
  }

  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    if (id_) engine_->Cancel(*id_);
  }
  void OnDone() override { Unref(); }
  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (!ok) write_failed_ = true;
    }
    Pump();
  }

  void OnEngineOutput(const SequenceOutput& output) {
    {
      absl::MutexLock lock(&mu_);
      completion_tokens_ += static_cast<int64_t>(output.token_ids.size());
      for (int32_t t : output.token_ids) {
        complete_.add_output_ids(static_cast<uint32_t>(t));
        if (stream_) pending_.add_token_ids(static_cast<uint32_t>(t));
      }
      if (!output.logprobs.empty()) {
        AddLogprobs(output.logprobs, complete_.mutable_output_logprobs());
        if (stream_) AddLogprobs(output.logprobs, pending_.mutable_output_logprobs());
      }
      has_pending_ = stream_ && pending_.token_ids_size() > 0;
    }
    Pump();
  }
  void OnEngineFinish(const GenerationSummary& s) {
    if (record_ != nullptr) {
      record_->SetGeneration({.finish_reason = FinishReasonName(s.finish_reason),
                              .prompt_tokens = s.prompt_tokens,
                              .cached_tokens = s.cached_tokens,
                              .completion_tokens = s.completion_tokens,
                              .queue_ms = s.queue_ms,
                              .ttft_ms = s.ttft_ms});
    }
    {
      absl::MutexLock lock(&mu_);
      complete_.set_finish_reason(FinishName(s.finish_reason));
      complete_.set_prompt_tokens(static_cast<uint32_t>(s.prompt_tokens));
      complete_.set_completion_tokens(static_cast<uint32_t>(s.completion_tokens));
      complete_.set_cached_tokens(static_cast<uint32_t>(s.cached_tokens));
      ended_ = true;
    }
    Pump();
  }
  void OnEngineError(const absl::Status& status) { FinishWithError(ToGrpcStatus(status)); }

  void FinishWithError(const grpc::Status& status) {
    {
      absl::MutexLock lock(&mu_);
      error_ = status;
      ended_ = true;
    }
    Pump();
  }

  void Ref() { refs_.fetch_add(1, std::memory_order_relaxed); }
  void Unref() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

 private:
  absl::StatusOr<GenerationRequest> Parse(grpc::CallbackServerContext* context,
                                          const vpb::GenerateRequest& request,
                                          const VllmServed* served) {
    if (absl::Status denied = CallerDenied(context); !denied.ok()) return denied;
    if (served == nullptr) return grpc_api::ModelLoadingError();
    const absl::Time arrival = served->clock->Now();
    absl::StatusOr<GenerationInput> input = ToGenerationInput(request);
    if (!input.ok()) return input.status();
    const BuildContext build{.deadline = ClientDeadline(*context),
                             .cancelled = [context] { return context->IsCancelled(); },
                             .caller = CallerOf(context)};
    absl::StatusOr<GenerationRequest> parsed = served->builder->Generation(*input, build);
    if (!parsed.ok()) return InProtocolNames(parsed.status());
    parsed->arrival_time = arrival;
    parsed->deadline = build.deadline == absl::InfiniteFuture()
                           ? absl::InfiniteFuture()
                           : arrival + (build.deadline - absl::Now());
    return parsed;
  }

  // Starts the next write or finishes, as the state allows (decided under the lock, acted on
  // outside it: gRPC may run reactions inline).
  void Pump() {
    enum class Action { kNone, kWrite, kFinish } action = Action::kNone;
    grpc::Status status;
    {
      absl::MutexLock lock(&mu_);
      if (finish_called_ || writing_) return;
      if (error_) {
        action = Action::kFinish;
        status = *error_;
      } else if (write_failed_) {
        if (ended_) {
          action = Action::kFinish;
          status = grpc::Status(grpc::StatusCode::CANCELLED, "the stream was closed");
        }
      } else if (has_pending_) {
        pending_.set_prompt_tokens(static_cast<uint32_t>(prompt_tokens_));
        pending_.set_completion_tokens(static_cast<uint32_t>(completion_tokens_));
        in_flight_.Clear();
        *in_flight_.mutable_chunk() = std::move(pending_);
        pending_.Clear();
        has_pending_ = false;
        writing_ = true;
        action = Action::kWrite;
      } else if (ended_ && !complete_sent_) {
        in_flight_.Clear();
        *in_flight_.mutable_complete() = complete_;
        complete_sent_ = true;
        writing_ = true;
        action = Action::kWrite;
      } else if (ended_) {
        action = Action::kFinish;
        status = grpc::Status::OK;
      }
      if (action == Action::kFinish) {
        finish_called_ = true;
        if (!request_id_.empty()) service_->Untrack(request_id_);
      }
    }
    if (action == Action::kWrite) StartWrite(&in_flight_);
    if (action == Action::kFinish) Finish(status);
  }

  VllmEngineService* const service_;
  const std::shared_ptr<grpc_api::CallRecord> record_;
  std::atomic<int> refs_{1};  // gRPC's, released in OnDone
  Engine* engine_ = nullptr;
  std::string request_id_;
  bool stream_ = false;
  int64_t prompt_tokens_ = 0;

  absl::Mutex mu_;
  std::optional<RequestId> id_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  int64_t completion_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  vpb::GenerateStreamChunk pending_ ABSL_GUARDED_BY(mu_);
  bool has_pending_ ABSL_GUARDED_BY(mu_) = false;
  vpb::GenerateComplete complete_ ABSL_GUARDED_BY(mu_);
  bool complete_sent_ ABSL_GUARDED_BY(mu_) = false;
  vpb::GenerateResponse in_flight_;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool write_failed_ ABSL_GUARDED_BY(mu_) = false;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<grpc::Status> error_ ABSL_GUARDED_BY(mu_);
  bool finish_called_ ABSL_GUARDED_BY(mu_) = false;
};

GenerateSink::GenerateSink(GenerateCall* call) : call_(call) { call_->Ref(); }
GenerateSink::~GenerateSink() { call_->Unref(); }
void GenerateSink::OnOutput(const SequenceOutput& output) { call_->OnEngineOutput(output); }
void GenerateSink::OnFinish(const GenerationSummary& summary) { call_->OnEngineFinish(summary); }
void GenerateSink::OnError(const absl::Status& status) { call_->OnEngineError(status); }

// ---- SubscribeKvEvents ----

void ToProto(const KvEventBatch& batch, cpb::KvEventBatch* out) {
  out->set_sequence_number(batch.sequence);
  out->set_timestamp(absl::ToDoubleSeconds(batch.time - absl::UnixEpoch()));
  for (const KvBlockEvent& e : batch.events) {
    cpb::KvCacheEvent* event = out->add_events();
    event->set_event_id(e.event_id);
    switch (e.kind) {
      case KvBlockEvent::Kind::kCleared:
        event->mutable_cleared();
        break;
      case KvBlockEvent::Kind::kRemoved:
        for (int64_t h : e.removed) event->mutable_removed()->add_block_hashes(h);
        break;
      case KvBlockEvent::Kind::kStored: {
        cpb::KvBlocksStored* stored = event->mutable_stored();
        if (e.parent_hash) stored->set_parent_block_hash(*e.parent_hash);
        for (const KvBlock& b : e.blocks) {
          cpb::KvBlock* block = stored->add_blocks();
          block->set_block_hash(b.hash);
          block->set_block_size(kKvBlockSize);
          for (int32_t t : b.tokens) block->add_token_ids(static_cast<uint32_t>(t));
        }
        break;
      }
    }
  }
}

// One subscriber: a snapshot or a replay, then live batches, one write at a time.
class KvEventsCall final : public grpc::ServerWriteReactor<cpb::KvEventBatch> {
 public:
  // The publisher's handle on the call; the call unhooks it in OnDone.
  struct Waker final : KvEventPublisher::Listener {
    void OnKvEvents() override {
      KvEventsCall* call = nullptr;
      {
        absl::MutexLock lock(&mu);
        call = call_;
        if (call != nullptr) call->Ref();
      }
      if (call == nullptr) return;
      call->Pump();
      call->Unref();
    }
    absl::Mutex mu;
    KvEventsCall* call_ ABSL_GUARDED_BY(mu) = nullptr;
  };

  explicit KvEventsCall(KvEventPublisher* publisher)
      : publisher_(publisher), waker_(std::make_shared<Waker>()) {
    absl::MutexLock lock(&waker_->mu);
    waker_->call_ = this;
  }

  void Start(grpc::CallbackServerContext* context, uint64_t start) {
    Ref();
    if (absl::Status denied = CallerDenied(context); !denied.ok()) {
      {
        absl::MutexLock lock(&mu_);
        finish_called_ = true;
      }
      Finish(ToGrpcStatus(denied));
      Unref();
      return;
    }
    view_ = CallerOf(context).role == Role::kAdmin ? KvEventView::kAll : KvEventView::kShared;
    {
      absl::MutexLock lock(&mu_);
      if (start == 0) {
        // "From the current state": the state as one batch, then what follows it.
        KvEventBatch snapshot = publisher_->Snapshot(view_);
        next_ = snapshot.sequence + 1;
        ToProto(snapshot, &in_flight_);
        writing_ = true;
      } else {
        next_ = start + 1;
        KvEventRead read = publisher_->Read(next_, view_);
        if (read.kind == KvEventRead::Kind::kResync) {
          context->AddInitialMetadata("kvserve-kv-events-gap",
                                      absl::StrCat(read.first_missing, "-", read.last_missing));
          Resync(read);
          writing_ = true;
        }
      }
    }
    bool write_first = false;
    {
      absl::MutexLock lock(&mu_);
      write_first = writing_;
    }
    // Initial metadata goes first, so the client's call resolves before any event comes.
    if (write_first) {
      StartWrite(&in_flight_);
    } else {
      StartSendInitialMetadata();
    }
    publisher_->AddListener(waker_);
    Pump();  // what came since the snapshot or the replay point
    Unref();
  }

  void OnSendInitialMetadataDone(bool ok) override {}
  void OnCancel() override {
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
    }
    Pump();
  }
  void OnDone() override {
    {
      absl::MutexLock lock(&waker_->mu);
      waker_->call_ = nullptr;
    }
    Unref();
  }
  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (!ok) cancelled_ = true;
    }
    Pump();
  }

  void Pump() {
    enum class Action { kNone, kWrite, kFinish } action = Action::kNone;
    grpc::Status status;
    {
      absl::MutexLock lock(&mu_);
      if (finish_called_ || writing_) return;
      if (cancelled_) {
        finish_called_ = true;
        action = Action::kFinish;
      } else {
        KvEventRead read = publisher_->Read(next_, view_);
        if (read.kind == KvEventRead::Kind::kBatch) {
          in_flight_.Clear();
          ToProto(read.batch, &in_flight_);
          ++next_;
          writing_ = true;
          action = Action::kWrite;
        } else if (read.kind == KvEventRead::Kind::kResync) {
          Resync(read);
          writing_ = true;
          action = Action::kWrite;
        } else if (read.kind == KvEventRead::Kind::kClosed) {
          finish_called_ = true;
          action = Action::kFinish;
          status = grpc::Status(grpc::StatusCode::UNAVAILABLE, "the server is shutting down");
        }
      }
    }
    if (action == Action::kWrite) StartWrite(&in_flight_);
    if (action == Action::kFinish) Finish(status);
  }

  void Ref() { refs_.fetch_add(1, std::memory_order_relaxed); }
  void Unref() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

 private:
  // The numbers asked for are gone (or from an earlier process): the whole state instead,
  // starting with "cleared", numbered with the last number; logged and counted, never silent.
  void Resync(const KvEventRead& read) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    spdlog::warn(
        "KV events: batches {}..{} are not in the replay buffer (--kv-events-buffer); the "
        "subscriber gets the whole state as batch {}",
        read.first_missing, read.last_missing, read.batch.sequence);
    in_flight_.Clear();
    ToProto(read.batch, &in_flight_);
    next_ = read.batch.sequence + 1;
  }

  KvEventPublisher* const publisher_;
  const std::shared_ptr<Waker> waker_;
  KvEventView view_ = KvEventView::kShared;
  std::atomic<int> refs_{1};  // gRPC's, released in OnDone
  absl::Mutex mu_;
  uint64_t next_ ABSL_GUARDED_BY(mu_) = 1;
  cpb::KvEventBatch in_flight_;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_called_ ABSL_GUARDED_BY(mu_) = false;
};

// A unary answer: denied callers and the loading model are refused first.
template <typename Handle>
grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* context, Handle&& handle) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::Status status = CallerDenied(context);
  if (status.ok()) status = std::forward<Handle>(handle)();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

}  // namespace

absl::StatusOr<GenerationInput> ToGenerationInput(const vpb::GenerateRequest& request) {
  GenerationInput in;
  switch (request.input_case()) {
    case vpb::GenerateRequest::kTokenized: {
      std::vector<int32_t> ids;
      ids.reserve(request.tokenized().input_ids_size());
      for (uint32_t id : request.tokenized().input_ids()) {
        if (id > static_cast<uint32_t>(INT32_MAX)) {
          return FieldError("tokenized.input_ids", absl::StrCat("token id ", id, " is too large"));
        }
        ids.push_back(static_cast<int32_t>(id));
      }
      in.input = PromptInput::TokenIds(std::move(ids));
      break;
    }
    case vpb::GenerateRequest::kText:
      in.input = PromptInput::Text(request.text());
      break;
    case vpb::GenerateRequest::INPUT_NOT_SET:
      return FieldError("input", "one of tokenized or text is required");
  }
  if (request.has_kv_transfer_params() || request.has_kv_transfer_params_json()) {
    return Unsupported("kv_transfer_params", "no prefill/decode disaggregation");
  }
  if (request.has_mm_inputs()) return Unsupported("mm_inputs", "text models only");
  if (request.has_data_parallel_rank() && request.data_parallel_rank() != 0) {
    return FieldError("data_parallel_rank", "kvserve has one rank, 0");
  }
  const vpb::SamplingParams& p = request.sampling_params();
  SamplingInput& s = in.sampling;
  if (p.has_temperature()) {
    s.temperature = p.temperature();
    s.do_sample = p.temperature() > 0;
  }
  // proto3 scalars: 0 is "unset" (vLLM's defaults: top_p 1, top_k off, min_p off).
  if (p.top_p() != 0) s.top_p = p.top_p();
  if (p.top_k() != 0) s.top_k = p.top_k();
  if (p.min_p() != 0) s.min_p = p.min_p();
  if (p.repetition_penalty() != 0) s.repetition_penalty = p.repetition_penalty();
  if (p.frequency_penalty() != 0) {
    return Unsupported("sampling_params.frequency_penalty", "use repetition_penalty");
  }
  if (p.presence_penalty() != 0) {
    return Unsupported("sampling_params.presence_penalty", "use repetition_penalty");
  }
  if (p.has_max_tokens()) s.max_new_tokens = p.max_tokens();
  if (p.min_tokens() != 0) return Unsupported("sampling_params.min_tokens", "no minimum length");
  s.stop.assign(p.stop().begin(), p.stop().end());
  for (uint32_t id : p.stop_token_ids()) s.stop_token_ids.push_back(static_cast<int32_t>(id));
  s.ignore_eos = p.ignore_eos();
  if (p.n() > 1) return Unsupported("sampling_params.n", "one sequence per request here");
  {
    using Kind = constraint::ConstraintSpec::Kind;
    constraint::ConstraintSpec spec;
    switch (p.constraint_case()) {
      case vpb::SamplingParams::kJsonSchema:
        spec.kind = Kind::kJsonSchema;
        spec.text = p.json_schema();
        break;
      case vpb::SamplingParams::kRegex:
        spec.kind = Kind::kRegex;
        spec.text = p.regex();
        break;
      case vpb::SamplingParams::kGrammar:
        spec.kind = Kind::kGrammar;
        spec.text = p.grammar();
        break;
      case vpb::SamplingParams::kJsonObject:
        spec.kind = Kind::kJsonObject;
        break;
      case vpb::SamplingParams::kChoice:
        spec.kind = Kind::kChoice;
        spec.choices.assign(p.choice().choices().begin(), p.choice().choices().end());
        break;
      case vpb::SamplingParams::kStructuralTag:
        return Unsupported("sampling_params.structural_tag", "structural tags come with tools");
      case vpb::SamplingParams::CONSTRAINT_NOT_SET:
        break;
    }
    if (p.constraint_case() != vpb::SamplingParams::CONSTRAINT_NOT_SET) s.constraint = spec;
  }
  if (p.has_logprobs()) {
    if (p.logprobs() < 0 || p.logprobs() > kMaxTopLogprobs) {
      return FieldError("sampling_params.logprobs", absl::StrCat("must be in [0, ", kMaxTopLogprobs,
                                                                 "] (got ", p.logprobs(), ")"));
    }
    s.logprobs = true;
    s.top_logprobs = p.logprobs();
  }
  if (p.has_prompt_logprobs()) return Unsupported("sampling_params.prompt_logprobs", "none");
  if (p.has_seed()) s.seed = static_cast<uint64_t>(static_cast<uint32_t>(p.seed()));
  if (!p.logit_bias().empty()) return Unsupported("sampling_params.logit_bias", "none");
  if (p.has_truncate_prompt_tokens()) {
    return Unsupported("sampling_params.truncate_prompt_tokens", "prompts are never cut");
  }
  return in;
}

VllmEngineService::VllmEngineService(const grpc_api::ReplicaIdentity* replica,
                                     KvEventPublisher* publisher, ServerMetrics* metrics,
                                     std::string version)
    : replica_(replica), publisher_(publisher), metrics_(metrics), version_(std::move(version)) {}

VllmEngineService::~VllmEngineService() = default;

void VllmEngineService::Track(const std::string& request_id, RequestId id) {
  absl::MutexLock lock(&mu_);
  live_[request_id] = id;
}

void VllmEngineService::Untrack(const std::string& request_id) {
  absl::MutexLock lock(&mu_);
  live_.erase(request_id);
}

grpc::ServerWriteReactor<vpb::GenerateResponse>* VllmEngineService::Generate(
    grpc::CallbackServerContext* context, const vpb::GenerateRequest* request) {
  grpc_api::BeginCall(context, *replica_, "Generate");
  {
    absl::MutexLock lock(&mu_);
    last_receive_ = absl::Now();
  }
  auto* call = new GenerateCall(this, grpc_api::FindCallRecord(context));
  call->Start(context, *request, served_.get());
  return call;
}

grpc::ServerUnaryReactor* VllmEngineService::HealthCheck(grpc::CallbackServerContext* context,
                                                         const vpb::HealthCheckRequest*,
                                                         vpb::HealthCheckResponse* response) {
  grpc_api::BeginCall(context, *replica_, "HealthCheck");
  return Answer(context, [&] {
    const bool loaded = served_.get() != nullptr;
    response->set_healthy(loaded);
    response->set_message(loaded ? "serving" : "the model is still loading");
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* VllmEngineService::Abort(grpc::CallbackServerContext* context,
                                                   const vpb::AbortRequest* request,
                                                   vpb::AbortResponse*) {
  grpc_api::BeginCall(context, *replica_, "Abort");
  return Answer(context, [&]() -> absl::Status {
    const VllmServed* served = served_.get();
    if (served == nullptr) return grpc_api::ModelLoadingError();
    std::vector<RequestId> ids;
    {
      absl::MutexLock lock(&mu_);
      for (const std::string& rid : request->request_ids()) {
        auto it = live_.find(rid);
        if (it != live_.end()) ids.push_back(it->second);
      }
    }
    // Unknown or finished ids are ignored, as vLLM does.
    for (RequestId id : ids) served->engine->Cancel(id);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* VllmEngineService::GetModelInfo(grpc::CallbackServerContext* context,
                                                          const vpb::GetModelInfoRequest*,
                                                          vpb::GetModelInfoResponse* response) {
  grpc_api::BeginCall(context, *replica_, "GetModelInfo");
  return Answer(context, [&]() -> absl::Status {
    const VllmServed* served = served_.get();
    if (served == nullptr) return grpc_api::ModelLoadingError();
    *response = served->model_info;
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* VllmEngineService::GetServerInfo(grpc::CallbackServerContext* context,
                                                           const vpb::GetServerInfoRequest*,
                                                           vpb::GetServerInfoResponse* response) {
  grpc_api::BeginCall(context, *replica_, "GetServerInfo");
  return Answer(context, [&]() -> absl::Status {
    const VllmServed* served = served_.get();
    if (served == nullptr) return grpc_api::ModelLoadingError();
    const EngineStats stats = served->engine->Stats();
    response->set_active_requests(static_cast<uint32_t>(stats.num_waiting + stats.num_running));
    response->set_is_paused(false);
    {
      absl::MutexLock lock(&mu_);
      response->set_last_receive_timestamp(
          absl::ToDoubleSeconds(last_receive_ - absl::UnixEpoch()));
    }
    response->set_uptime_seconds(absl::ToDoubleSeconds(absl::Now() - started_));
    response->set_server_type("kvserve-grpc");
    response->set_data_parallel_size(1);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* VllmEngineService::GetLoads(grpc::CallbackServerContext* context,
                                                      const vpb::GetLoadsRequest* request,
                                                      vpb::GetLoadsResponse* response) {
  grpc_api::BeginCall(context, *replica_, "GetLoads");
  return Answer(context, [&]() -> absl::Status {
    const VllmServed* served = served_.get();
    if (served == nullptr) return grpc_api::ModelLoadingError();
    if (request->has_dp_rank() && request->dp_rank() != 0) {
      return FieldError("dp_rank", "kvserve has one rank, 0");
    }
    const EngineStats stats = served->engine->Stats();
    response->set_timestamp(
        absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", absl::Now(), absl::UTCTimeZone()));
    response->set_version(version_);
    response->set_dp_rank_count(1);
    vpb::SchedulerLoad* load = response->add_loads();
    load->set_dp_rank(0);
    load->set_num_running_reqs(static_cast<int32_t>(stats.num_running));
    load->set_num_waiting_reqs(static_cast<int32_t>(stats.num_waiting));
    load->set_num_total_reqs(static_cast<int32_t>(stats.num_running + stats.num_waiting));
    load->set_token_usage(metrics_->kv_cache_usage());
    const int64_t queries = stats.prefixes.automatic_hits + stats.prefixes.automatic_misses +
                            stats.prefixes.named_hits + stats.prefixes.named_misses;
    const int64_t hits = stats.prefixes.automatic_hits + stats.prefixes.named_hits;
    load->set_cache_hit_rate(queries == 0 ? 0.0 : static_cast<double>(hits) / queries);
    load->set_max_running_requests(static_cast<int32_t>(served->max_running_requests));
    load->set_utilization(served->max_running_requests == 0
                              ? 0.0
                              : static_cast<double>(stats.num_running) /
                                    static_cast<double>(served->max_running_requests));
    return absl::OkStatus();
  });
}

grpc::ServerWriteReactor<cpb::KvEventBatch>* VllmEngineService::SubscribeKvEvents(
    grpc::CallbackServerContext* context, const cpb::SubscribeKvEventsRequest* request) {
  grpc_api::BeginCall(context, *replica_, "SubscribeKvEvents");
  auto* call = new KvEventsCall(publisher_);
  call->Start(context, request->start_sequence_number());
  return call;
}

}  // namespace kvserve::server::vllm_api
