// GenerationService: unary and streaming reactors that connect gRPC calls to engine sinks.
#include "server/generation_service.h"

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "server/engine.h"
#include "server/status_mapping.h"

namespace kvserve::server {
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
  m->mutable_timings()->set_queue_ms(s.queue_ms);
  m->mutable_timings()->set_ttft_ms(s.ttft_ms);
  m->mutable_timings()->set_decode_ms(s.decode_ms);
  m->mutable_cache_report()->set_cache_implementation(s.cache_implementation);
  m->mutable_cache_report()->set_prefix(s.prefix);
  m->mutable_cache_report()->set_offload_fallback(s.offload_fallback);
}

// The request's arrival time and the client's deadline (InfiniteFuture when it set none).
void Stamp(const grpc::CallbackServerContext& context, GenerationRequest* request) {
  request->arrival_time = absl::Now();
  const auto deadline = context.deadline();
  // gRPC reports "no deadline" as a time far in the future.
  if (deadline < std::chrono::system_clock::now() + std::chrono::hours(24 * 365 * 100)) {
    request->deadline = absl::FromChrono(deadline);
  }
}

// Starts a Generate call of either kind: submits `request` with a sink of the call's own Sink
// type and remembers the engine's id (for OnCancel), or finishes the call with the error.
template <typename Call>
void SubmitOrFinish(Call& call, absl::StatusOr<GenerationRequest> request) {
  if (!request.ok()) {
    call.Finish(ToGrpcStatus(request.status()));
    return;
  }
  absl::StatusOr<RequestId> id =
      call.engine_->Submit(*std::move(request), std::make_shared<typename Call::Sink>(&call));
  if (!id.ok()) {
    call.Finish(ToGrpcStatus(id.status()));
    return;
  }
  absl::MutexLock lock(&call.mu_);
  call.id_ = *id;
}

// Unary Generate: the engine's outputs accumulate in the response; the terminal event
// finishes the call. Only the engine thread calls the sink, so it needs no lock.
class UnaryGenerateCall final : public grpc::ServerUnaryReactor {
 public:
  UnaryGenerateCall(Engine* engine, v1::GenerateResponse* response)
      : engine_(engine), response_(response) {}

  // Submits `request`, or finishes the call at once with its error.
  void Start(absl::StatusOr<GenerationRequest> request) {
    SubmitOrFinish(*this, std::move(request));
  }

  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    if (id_) engine_->Cancel(*id_);
  }
  void OnDone() override { delete this; }

 private:
  template <typename Call>
  friend void SubmitOrFinish(Call& call, absl::StatusOr<GenerationRequest> request);

  class Sink final : public RequestSink {
   public:
    explicit Sink(UnaryGenerateCall* call) : call_(call) {}
    void OnOutput(std::string_view text, absl::Span<const int32_t> token_ids) override {
      call_->response_->mutable_text()->append(text);
      for (int32_t id : token_ids) call_->response_->add_token_ids(id);
    }
    void OnFinish(const GenerationSummary& summary) override {
      SetSummary(summary, call_->response_);
      call_->Finish(grpc::Status::OK);
    }
    void OnError(const absl::Status& status) override { call_->Finish(ToGrpcStatus(status)); }

   private:
    UnaryGenerateCall* call_;
  };

  Engine* engine_;
  v1::GenerateResponse* response_;
  absl::Mutex mu_;
  std::optional<RequestId> id_ ABSL_GUARDED_BY(mu_);
};

// GenerateStream: the engine's outputs become messages; while a write is in flight new
// output is merged into the next message, so at most one write is ever outstanding and a
// slow client costs memory only for text it has not read yet.
class StreamGenerateCall final : public grpc::ServerWriteReactor<v1::GenerateStreamResponse> {
 public:
  explicit StreamGenerateCall(Engine* engine) : engine_(engine) {}

  // Submits `request`, or finishes the call at once with its error.
  void Start(absl::StatusOr<GenerationRequest> request) {
    SubmitOrFinish(*this, std::move(request));
  }

  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (!ok) write_failed_ = true;
    }
    Pump();
  }
  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    if (id_) engine_->Cancel(*id_);
  }
  void OnDone() override { delete this; }

 private:
  template <typename Call>
  friend void SubmitOrFinish(Call& call, absl::StatusOr<GenerationRequest> request);

  class Sink final : public RequestSink {
   public:
    explicit Sink(StreamGenerateCall* call) : call_(call) {}
    void OnOutput(std::string_view text, absl::Span<const int32_t> token_ids) override {
      {
        absl::MutexLock lock(&call_->mu_);
        call_->pending_.mutable_text()->append(text);
        for (int32_t id : token_ids) call_->pending_.add_token_ids(id);
      }
      call_->Pump();
    }
    void OnFinish(const GenerationSummary& summary) override {
      {
        absl::MutexLock lock(&call_->mu_);
        SetSummary(summary, &call_->pending_);
        call_->ended_ = true;
      }
      call_->Pump();
    }
    void OnError(const absl::Status& status) override {
      {
        absl::MutexLock lock(&call_->mu_);
        call_->error_ = ToGrpcStatus(status);
        call_->ended_ = true;
      }
      call_->Pump();
    }

   private:
    StreamGenerateCall* call_;
  };

  // Starts the next write or finishes the call, whichever the state allows. The decision is
  // made under the lock and acted on outside it: gRPC may run reactions inline. After Finish
  // nothing touches the reactor, which OnDone deletes.
  void Pump() {
    enum class Action { kNone, kWrite, kFinish } action = Action::kNone;
    grpc::Status finish_status;
    {
      absl::MutexLock lock(&mu_);
      if (finish_called_ || writing_) return;
      const bool has_output = !pending_.text().empty() || pending_.token_ids_size() > 0;
      if (error_) {
        action = Action::kFinish;
        finish_status = *error_;
      } else if (!write_failed_ && (has_output || (ended_ && !final_sent_))) {
        in_flight_ = std::move(pending_);
        pending_.Clear();
        writing_ = true;
        if (ended_) final_sent_ = true;
        action = Action::kWrite;
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

  Engine* engine_;
  absl::Mutex mu_;
  std::optional<RequestId> id_ ABSL_GUARDED_BY(mu_);
  v1::GenerateStreamResponse pending_ ABSL_GUARDED_BY(mu_);  // output not yet written
  v1::GenerateStreamResponse in_flight_;                     // the write in flight
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool write_failed_ ABSL_GUARDED_BY(mu_) = false;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;       // the engine sent its terminal event
  bool final_sent_ ABSL_GUARDED_BY(mu_) = false;  // the message with the summary is written
  std::optional<grpc::Status> error_ ABSL_GUARDED_BY(mu_);
  bool finish_called_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

grpc::ServerUnaryReactor* GenerationService::Generate(grpc::CallbackServerContext* context,
                                                      const v1::GenerateRequest* request,
                                                      v1::GenerateResponse* response) {
  const ServedModel* served = served_.get();
  if (served == nullptr) {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(ToGrpcStatus(ModelLoadingError()));
    return reactor;
  }
  auto* call = new UnaryGenerateCall(served->engine, response);
  absl::StatusOr<GenerationRequest> parsed = served->parser->Parse(*request);
  if (parsed.ok()) Stamp(*context, &*parsed);
  call->Start(std::move(parsed));
  return call;
}

grpc::ServerWriteReactor<v1::GenerateStreamResponse>* GenerationService::GenerateStream(
    grpc::CallbackServerContext* context, const v1::GenerateRequest* request) {
  const ServedModel* served = served_.get();
  auto* call = new StreamGenerateCall(served ? served->engine : nullptr);
  if (served == nullptr) {
    call->Start(ModelLoadingError());
    return call;
  }
  absl::StatusOr<GenerationRequest> parsed = served->parser->Parse(*request);
  if (parsed.ok()) Stamp(*context, &*parsed);
  call->Start(std::move(parsed));
  return call;
}

grpc::ServerUnaryReactor* GenerationService::Tokenize(grpc::CallbackServerContext* context,
                                                      const v1::TokenizeRequest* request,
                                                      v1::TokenizeResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const ServedModel* served = served_.GetOrFinish(reactor);
  if (served == nullptr) return reactor;
  absl::StatusOr<v1::TokenizeResponse> result = served->parser->Tokenize(*request);
  if (result.ok()) *response = *std::move(result);
  reactor->Finish(ToGrpcStatus(result.status()));
  return reactor;
}

grpc::ServerUnaryReactor* GenerationService::GetModelInfo(grpc::CallbackServerContext* context,
                                                          const v1::GetModelInfoRequest* request,
                                                          v1::ModelInfo* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const ServedModel* served = served_.GetOrFinish(reactor);
  if (served == nullptr) return reactor;
  *response = served->info;
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace kvserve::server
