// GenerationService: unary and streaming reactors that connect gRPC calls to engine sinks.
//
// Lifetimes: a Generate reactor is shared by gRPC (until OnDone) and the engine (until it
// drops the request's sink, after the terminal event). Each holds a reference; the last one
// released deletes the reactor, so neither side can touch it after the other freed it.
#include "server/grpc_api/generation_service.h"

#include <atomic>
#include <chrono>
#include <deque>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "server/engine.h"
#include "server/grpc_api/proto_inputs.h"
#include "server/grpc_api/status_mapping.h"
#include "server/grpc_api/unary_answer.h"
#include "server/grpc_api/wire_codec.h"

namespace kvserve::server::grpc_api {
namespace {

v1::FinishReason ToProto(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength:
      return v1::FINISH_REASON_LENGTH;
    case FinishReason::kStop:
      return v1::FINISH_REASON_STOP;
    case FinishReason::kEos:
      return v1::FINISH_REASON_EOS;
    case FinishReason::kCancelled:
      return v1::FINISH_REASON_CANCELLED;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

// Writes the final fields shared by GenerateResponse and the last GenerateStreamResponse.
template <typename Message>
void SetSummary(const GenerationSummary& s, Message* m) {
  m->set_finish_reason(ToProto(s.finish_reason));
  m->mutable_usage()->set_prompt_tokens(static_cast<int32_t>(s.prompt_tokens));
  m->mutable_usage()->set_cached_tokens(static_cast<int32_t>(s.cached_tokens));
  m->mutable_usage()->set_completion_tokens(static_cast<int32_t>(s.completion_tokens));
  m->mutable_usage()->set_forced_tokens(static_cast<int32_t>(s.forced_tokens));
  m->mutable_timings()->set_queue_ms(s.queue_ms);
  m->mutable_timings()->set_ttft_ms(s.ttft_ms);
  m->mutable_timings()->set_decode_ms(s.decode_ms);
  m->mutable_cache_report()->set_cache_implementation(s.cache_implementation);
  m->mutable_cache_report()->set_prefix(s.prefix);
  m->mutable_cache_report()->set_offload_fallback(s.offload_fallback);
  m->mutable_cache_report()->set_session(s.session);
  m->mutable_cache_report()->set_session_recompute_reason(s.session_recompute_reason);
  m->mutable_cache_report()->set_prefix_kv_mode(s.prefix_kv_mode);
}

// Appends log-probabilities to a repeated PositionLogprobs field.
void AddLogprobs(absl::Span<const model::PositionLogprobs> logprobs,
                 google::protobuf::RepeatedPtrField<v1::PositionLogprobs>* out) {
  for (const model::PositionLogprobs& p : logprobs) {
    v1::PositionLogprobs* position = out->Add();
    position->mutable_chosen()->set_token_id(p.chosen.token_id);
    position->mutable_chosen()->set_logprob(p.chosen.logprob);
    for (const model::TokenLogprob& t : p.top) {
      v1::TokenLogprob* top = position->add_top();
      top->set_token_id(t.token_id);
      top->set_logprob(t.logprob);
    }
  }
}

// The client's deadline (wall-clock time), InfiniteFuture when it set none.
absl::Time ClientDeadline(const grpc::CallbackServerContext& context) {
  const auto deadline = context.deadline();
  // gRPC reports "no deadline" as a time far in the future.
  if (deadline < std::chrono::system_clock::now() + std::chrono::hours(24 * 365 * 100)) {
    return absl::FromChrono(deadline);
  }
  return absl::InfiniteFuture();
}

// Parses and validates a raw GenerateRequest into what the engine runs, stamped with its
// arrival time and deadline. Tokenizing and rendering stop when the client cancels.
absl::StatusOr<GenerationRequest> ParseGenerate(grpc::CallbackServerContext* context,
                                                const grpc::ByteBuffer& raw,
                                                const ServedModel* served) {
  if (served == nullptr) return ModelLoadingError();
  const absl::Time arrival = served->clock->Now();
  v1::GenerateRequest request;
  absl::Status wire = ParseCallRequest(*context, raw, &request);
  if (!wire.ok()) return wire;
  const BuildContext build_context{.deadline = ClientDeadline(*context),
                                   .cancelled = [context] { return context->IsCancelled(); },
                                   .caller = CallerOf(context)};
  absl::StatusOr<GenerationRequest> parsed =
      served->builder->Generation(ToInput(request), build_context);
  if (!parsed.ok()) return parsed;
  parsed->arrival_time = arrival;
  // The engine counts in its clock's time: the deadline is what is left of the client's.
  parsed->deadline = build_context.deadline == absl::InfiniteFuture()
                         ? absl::InfiniteFuture()
                         : arrival + (build_context.deadline - absl::Now());
  return parsed;
}

// The engine's handle on a call: forwards its events and keeps the call alive until the
// engine drops it.
template <typename Call>
class CallSink final : public RequestSink {
 public:
  explicit CallSink(Call* call) : call_(call) { call_->Ref(); }
  ~CallSink() override { call_->Unref(); }
  CallSink(const CallSink&) = delete;
  CallSink& operator=(const CallSink&) = delete;

  void OnOutput(const SequenceOutput& output) override { call_->OnEngineOutput(output); }
  void OnFinish(const GenerationSummary& summary) override { call_->OnEngineFinish(summary); }
  void OnError(const absl::Status& status) override { call_->OnEngineError(status); }

 private:
  Call* const call_;
};

// The part every Generate reactor shares: the two references (gRPC's and the engine's), the
// engine's id of the request, and a cancel that may arrive before that id is known.
// `Reactor` is grpc::ServerUnaryReactor or grpc::ServerWriteReactor<grpc::ByteBuffer>;
// `Derived` implements the OnEngine* events and FinishWithError.
template <typename Derived, typename Reactor>
class EngineCall : public Reactor {
 public:
  // `record` (null without a CallTracker) hears the request's usage and whether the engine
  // counted it.
  EngineCall(Engine* engine, std::string request_id, std::shared_ptr<CallRecord> record)
      : engine_(engine), request_id_(std::move(request_id)), record_(std::move(record)) {}

  void OnCancel() final {
    absl::MutexLock lock(&id_mu_);
    cancelled_ = true;
    if (id_) engine_->Cancel(*id_);
  }
  void OnDone() final { Unref(); }

  void Ref() { refs_.fetch_add(1, std::memory_order_relaxed); }
  void Unref() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  // Parses the raw request and submits it with a sink that holds a reference to this call,
  // or finishes the call with the request's error (an exception escaping the parser becomes
  // INTERNAL naming the request id). Called once, from the handler.
  void Start(grpc::CallbackServerContext* context, const grpc::ByteBuffer& raw,
             const ServedModel* served, std::string_view method) {
    // The handler's own reference: the engine may finish the request, and gRPC release its
    // reference, before this function returns.
    Ref();
    absl::StatusOr<GenerationRequest> request;
    try {
      const absl::Status denied = CallerDenied(context);
      request = denied.ok() ? ParseGenerate(context, raw, served)
                            : absl::StatusOr<GenerationRequest>(denied);
    } catch (const std::exception& e) {
      request = InternalErrorFor(request_id_, method, &e);
    }
    Derived* self = static_cast<Derived*>(this);
    if (!request.ok()) {
      self->FinishWithError(ToGrpcStatus(request.status()));
    } else {
      // Submit counts the request in the metrics, refused or at its end (which may come
      // before Submit returns).
      if (record_ != nullptr) {
        record_->MarkCountedByEngine();
        record_->SetPromptTokens(static_cast<int64_t>(request->prompt_ids.size()));
      }
      absl::StatusOr<RequestId> id =
          engine_->Submit(*std::move(request), std::make_shared<CallSink<Derived>>(self));
      if (!id.ok()) {
        self->FinishWithError(ToGrpcStatus(id.status()));
      } else {
        absl::MutexLock lock(&id_mu_);
        id_ = *id;
        // The client cancelled before the engine's id was known: pass it on now.
        if (cancelled_) engine_->Cancel(*id_);
      }
    }
    Unref();
  }

 protected:
  // Tells the call's record what the engine's summary says. Before the call's Finish.
  void RecordUsage(const GenerationSummary& s) {
    if (record_ == nullptr) return;
    record_->SetGeneration({.finish_reason = FinishReasonName(s.finish_reason),
                            .prompt_tokens = s.prompt_tokens,
                            .cached_tokens = s.cached_tokens,
                            .completion_tokens = s.completion_tokens,
                            .queue_ms = s.queue_ms,
                            .ttft_ms = s.ttft_ms});
  }

 private:
  Engine* const engine_;  // null while the model loads (every call then fails at parsing)
  const std::string request_id_;
  const std::shared_ptr<CallRecord> record_;
  std::atomic<int> refs_{1};  // gRPC's, released in OnDone
  absl::Mutex id_mu_;
  std::optional<RequestId> id_ ABSL_GUARDED_BY(id_mu_);
  bool cancelled_ ABSL_GUARDED_BY(id_mu_) = false;
};

// Unary Generate: the engine's outputs accumulate in the response; the terminal event
// finishes the call. Only the engine thread touches the response, so it needs no lock.
class UnaryGenerateCall final : public EngineCall<UnaryGenerateCall, grpc::ServerUnaryReactor> {
 public:
  UnaryGenerateCall(Engine* engine, std::string request_id, std::shared_ptr<CallRecord> record,
                    grpc::ByteBuffer* raw_response)
      : EngineCall(engine, std::move(request_id), std::move(record)), raw_response_(raw_response) {}

  void OnEngineOutput(const SequenceOutput& output) {
    while (response_.sequences_size() <= output.index) {
      response_.add_sequences()->set_index(response_.sequences_size() - 1);
    }
    v1::Sequence* sequence = response_.mutable_sequences(output.index);
    sequence->mutable_text()->append(output.text);
    for (int32_t id : output.token_ids) sequence->add_token_ids(id);
    AddLogprobs(output.logprobs, sequence->mutable_logprobs());
    if (output.finish) sequence->set_finish_reason(ToProto(*output.finish));
    if (output.score) sequence->set_score(*output.score);
  }
  void OnEngineFinish(const GenerationSummary& summary) {
    RecordUsage(summary);
    SetSummary(summary, &response_);
    if (response_.sequences_size() == 0) response_.add_sequences();
    // The first sequence is also the response's own text, tokens and finish reason.
    v1::Sequence* first = response_.mutable_sequences(0);
    if (summary.num_sequences == 1) first->set_finish_reason(ToProto(summary.finish_reason));
    response_.set_text(first->text());
    *response_.mutable_token_ids() = first->token_ids();
    response_.set_finish_reason(first->finish_reason());
    Finish(ToGrpcStatus(SerializeWireMessage(response_, raw_response_)));
  }
  void OnEngineError(const absl::Status& status) { Finish(ToGrpcStatus(status)); }

  void FinishWithError(const grpc::Status& status) { Finish(status); }

 private:
  grpc::ByteBuffer* const raw_response_;  // gRPC's, valid until OnDone
  v1::GenerateResponse response_;
};

// GenerateStream: the engine's outputs become messages; while a write is in flight new
// output is merged into the next message, so at most one write is ever outstanding and a
// slow client costs memory only for text it has not read yet.
class StreamGenerateCall final
    : public EngineCall<StreamGenerateCall, grpc::ServerWriteReactor<grpc::ByteBuffer>> {
 public:
  StreamGenerateCall(Engine* engine, std::string request_id, std::shared_ptr<CallRecord> record)
      : EngineCall(engine, std::move(request_id), std::move(record)) {}

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
      // Output of one sequence merges into its unwritten message; another sequence, or a
      // sequence's end, starts a new one.
      if (pending_.empty() || pending_.back().index() != output.index ||
          pending_.back().finish_reason() != v1::FINISH_REASON_UNSPECIFIED ||
          pending_.back().has_score()) {
        pending_.emplace_back();
        pending_.back().set_index(output.index);
      }
      v1::GenerateStreamResponse& message = pending_.back();
      message.mutable_text()->append(output.text);
      for (int32_t id : output.token_ids) message.add_token_ids(id);
      AddLogprobs(output.logprobs, message.mutable_logprobs());
      if (output.finish) message.set_finish_reason(ToProto(*output.finish));
      if (output.score) message.set_score(*output.score);
    }
    Pump();
  }
  void OnEngineFinish(const GenerationSummary& summary) {
    RecordUsage(summary);
    {
      absl::MutexLock lock(&mu_);
      if (pending_.empty()) {
        pending_.emplace_back();
        pending_.back().set_index(last_index_);
      }
      v1::GenerateStreamResponse& last = pending_.back();
      const v1::FinishReason own = last.finish_reason();
      SetSummary(summary, &last);
      // With several sequences the message keeps its own sequence's finish reason.
      if (summary.num_sequences > 1) last.set_finish_reason(own);
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

 private:
  // Starts the next write or finishes the call, whichever the state allows. The decision is
  // made under the lock and acted on outside it: gRPC may run reactions inline. Finish is
  // called once; the references keep the reactor valid for a Pump that comes after it.
  void Pump() {
    enum class Action { kNone, kWrite, kFinish } action = Action::kNone;
    grpc::Status finish_status;
    {
      absl::MutexLock lock(&mu_);
      if (finish_called_ || writing_) return;
      if (error_) {
        action = Action::kFinish;
        finish_status = *error_;
      } else if (!write_failed_ && !pending_.empty() && !HoldBack()) {
        absl::Status serialized = SerializeWireMessage(pending_.front(), &in_flight_);
        last_index_ = pending_.front().index();
        pending_.pop_front();
        if (!serialized.ok()) {
          action = Action::kFinish;
          finish_status = ToGrpcStatus(serialized);
        } else {
          writing_ = true;
          if (ended_ && pending_.empty()) final_sent_ = true;
          action = Action::kWrite;
        }
      } else if (ended_) {
        // Everything is written (or the client stopped reading): the stream is over.
        action = Action::kFinish;
        finish_status = write_failed_ && !final_sent_
                            ? grpc::Status(grpc::StatusCode::CANCELLED, "the stream was closed")
                            : grpc::Status::OK;
      }
      if (action == Action::kFinish) finish_called_ = true;
    }
    if (action == Action::kWrite) StartWrite(&in_flight_);
    if (action == Action::kFinish) Finish(finish_status);
  }

  // A multi-sequence request's message that ends a sequence is held while it is the last one
  // pending and the engine has not ended: it may be the stream's last message, which must
  // carry the summary too.
  bool HoldBack() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !ended_ && pending_.size() == 1 &&
           pending_.front().finish_reason() != v1::FINISH_REASON_UNSPECIFIED;
  }

  absl::Mutex mu_;
  // Output not yet written, in order (one message per sequence run).
  std::deque<v1::GenerateStreamResponse> pending_ ABSL_GUARDED_BY(mu_);
  int last_index_ ABSL_GUARDED_BY(mu_) = 0;  // the sequence of the last message
  grpc::ByteBuffer in_flight_;               // the write in flight
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool write_failed_ ABSL_GUARDED_BY(mu_) = false;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;       // the engine sent its terminal event
  bool final_sent_ ABSL_GUARDED_BY(mu_) = false;  // the message with the summary is written
  std::optional<grpc::Status> error_ ABSL_GUARDED_BY(mu_);
  bool finish_called_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

grpc::ServerUnaryReactor* GenerationService::Generate(grpc::CallbackServerContext* context,
                                                      const grpc::ByteBuffer* request,
                                                      grpc::ByteBuffer* response) {
  const ServedModel* served = served_.get();
  auto* call = new UnaryGenerateCall(served ? served->engine : nullptr,
                                     BeginCall(context, *replica_, "Generate"),
                                     FindCallRecord(context), response);
  call->Start(context, *request, served, "Generate");
  return call;
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* GenerationService::GenerateStream(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  const ServedModel* served = served_.get();
  auto* call = new StreamGenerateCall(served ? served->engine : nullptr,
                                      BeginCall(context, *replica_, "GenerateStream"),
                                      FindCallRecord(context));
  call->Start(context, *request, served, "GenerateStream");
  return call;
}

grpc::ServerUnaryReactor* GenerationService::Tokenize(grpc::CallbackServerContext* context,
                                                      const grpc::ByteBuffer* request,
                                                      grpc::ByteBuffer* response) {
  return AnswerUnary<v1::TokenizeRequest, v1::TokenizeResponse>(
      context, *replica_, "Tokenize", request, response,
      [this](const v1::TokenizeRequest& in, v1::TokenizeResponse* out) -> absl::Status {
        const ServedModel* served = served_.get();
        if (served == nullptr) return ModelLoadingError();
        absl::StatusOr<TokenizeResult> result = served->builder->Tokenize(ToInput(in));
        if (!result.ok()) return result.status();
        *out = ToProto(*result);
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* GenerationService::GetModelInfo(grpc::CallbackServerContext* context,
                                                          const grpc::ByteBuffer* request,
                                                          grpc::ByteBuffer* response) {
  return AnswerUnary<v1::GetModelInfoRequest, v1::ModelInfo>(
      context, *replica_, "GetModelInfo", request, response,
      [this](const v1::GetModelInfoRequest&, v1::ModelInfo* out) -> absl::Status {
        const ServedModel* served = served_.get();
        if (served == nullptr) return ModelLoadingError();
        *out = served->info;
        out->set_replica_id(replica_->Get());
        return absl::OkStatus();
      });
}

}  // namespace kvserve::server::grpc_api
