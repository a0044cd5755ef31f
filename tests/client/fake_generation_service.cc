// The in-process fake kvserve server of the client tests (see fake_generation_service.h).
#include "fake_generation_service.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace kvserve::client::testing {
namespace {

int32_t MaxNewTokens(const v1::GenerateRequest& request) {
  return request.sampling().has_max_new_tokens() ? request.sampling().max_new_tokens() : 3;
}

int32_t NumSequences(const v1::GenerateRequest& request) {
  return request.sampling().has_num_return_sequences()
             ? std::max(1, request.sampling().num_return_sequences())
             : 1;
}

// How FakeSequence's sequence `index` ends.
v1::FinishReason FakeFinishReason(const v1::GenerateRequest& request, int32_t index) {
  if (request.prompt() == "drain") return v1::FINISH_REASON_CANCELLED;
  return index == 0 ? v1::FINISH_REASON_LENGTH : v1::FINISH_REASON_EOS;
}

// One token of FakeSequence.
void AddToken(const v1::GenerateRequest& request, int32_t index, int32_t j, std::string& text,
              google::protobuf::RepeatedField<int32_t>& token_ids,
              google::protobuf::RepeatedPtrField<v1::PositionLogprobs>& logprobs) {
  const int32_t id = 10 + 10 * index + j;
  text.append(index == 0 ? absl::StrCat("t", j) : absl::StrCat("s", index, "t", j));
  token_ids.Add(id);
  if (!request.sampling().logprobs()) return;
  v1::PositionLogprobs* position = logprobs.Add();
  const float logprob = -0.25f * static_cast<float>(j + 1);
  position->mutable_chosen()->set_token_id(id);
  position->mutable_chosen()->set_logprob(logprob);
  for (int32_t k = 0; k < request.sampling().top_logprobs(); ++k) {
    v1::TokenLogprob* top = position->add_top();
    top->set_token_id(id + k);
    top->set_logprob(logprob - static_cast<float>(k));
  }
}

int32_t PromptTokens(const v1::GenerateRequest& request) {
  if (request.has_token_ids()) return request.token_ids().ids_size();
  if (!request.has_messages()) return static_cast<int32_t>(request.prompt().size());
  int32_t tokens = 0;
  for (const v1::ChatMessage& message : request.messages().messages()) {
    tokens += static_cast<int32_t>(message.content().size()) + 1;
  }
  return tokens;
}

// Fills the answer's usage and cache report, running the turn on `sessions` when the request
// names a session; the turn's error.
absl::Status Report(const v1::GenerateRequest& request, int32_t completion_tokens,
                    FakeSessionsService& sessions, v1::Usage& usage,
                    v1::CacheReport& cache_report) {
  usage.set_prompt_tokens(PromptTokens(request));
  usage.set_completion_tokens(completion_tokens);
  cache_report.set_cache_implementation("dynamic");
  if (request.session().empty()) return absl::OkStatus();
  absl::StatusOr<int32_t> cached =
      sessions.RunTurn(request.session(), usage.prompt_tokens(), completion_tokens);
  if (!cached.ok()) return cached.status();
  usage.set_cached_tokens(*cached);
  cache_report.set_session(request.session());
  return absl::OkStatus();
}

grpc::Status ToGrpc(const absl::Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

// Writes its messages one at a time; with `hang`, only the first, then waits for the cancel.
class StreamReactor final : public grpc::ServerWriteReactor<v1::GenerateStreamResponse> {
 public:
  StreamReactor(const v1::GenerateRequest& request, FakeSessionsService& sessions)
      : hang_(request.prompt() == "hang") {
    if (request.cache().cache_implementation() == "unknown") {
      FinishOnce(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                              "cache.cache_implementation: unknown strategy"));
      return;
    }
    const int32_t n = hang_ ? 1 : MaxNewTokens(request);
    const int32_t sequences = hang_ ? 1 : NumSequences(request);
    if (request.sampling().num_beams() > 1) {
      for (int32_t i = 0; i < sequences; ++i) {
        const v1::Sequence sequence = FakeSequence(request, i, n);
        v1::GenerateStreamResponse& message = messages_.emplace_back();
        message.set_index(i);
        message.set_text(sequence.text());
        *message.mutable_token_ids() = sequence.token_ids();
        *message.mutable_logprobs() = sequence.logprobs();
        message.set_score(sequence.score());
        message.set_finish_reason(sequence.finish_reason());
      }
    } else {
      for (int32_t j = 0; j < n; ++j) {
        for (int32_t i = 0; i < sequences; ++i) {
          v1::GenerateStreamResponse& message = messages_.emplace_back();
          message.set_index(i);
          AddToken(request, i, j, *message.mutable_text(), *message.mutable_token_ids(),
                   *message.mutable_logprobs());
          if (j + 1 == n && !hang_) {
            message.set_finish_reason(FakeFinishReason(request, i));
          }
        }
      }
    }
    if (!hang_) {
      v1::GenerateStreamResponse& last = messages_.back();
      const absl::Status turn = Report(request, n * sequences, sessions, *last.mutable_usage(),
                                       *last.mutable_cache_report());
      if (!turn.ok()) {
        FinishOnce(ToGrpc(turn));
        return;
      }
    }
    absl::MutexLock lock(&mu_);
    WriteNextLocked();
  }

  void OnWriteDone(bool ok) override {
    std::optional<grpc::Status> finish;
    {
      absl::MutexLock lock(&mu_);
      write_in_flight_ = false;
      if (!ok || cancelled_) {
        finish = grpc::Status::CANCELLED;
      } else if (!hang_ && !WriteNextLocked()) {
        finish = grpc::Status::OK;
      }
    }
    if (finish.has_value()) FinishOnce(*finish);
  }

  void OnCancel() override {
    bool finish = false;
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
      finish = !write_in_flight_;
    }
    if (finish) FinishOnce(grpc::Status::CANCELLED);
  }

  void OnDone() override { delete this; }

 private:
  // Starts the next write; false when every message is written.
  bool WriteNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (next_ >= messages_.size()) return false;
    write_in_flight_ = true;
    StartWrite(&messages_[next_++]);
    return true;
  }

  void FinishOnce(const grpc::Status& status) {
    {
      absl::MutexLock lock(&mu_);
      if (finished_) return;
      finished_ = true;
    }
    Finish(status);
  }

  const bool hang_;
  std::vector<v1::GenerateStreamResponse> messages_;
  absl::Mutex mu_;
  size_t next_ ABSL_GUARDED_BY(mu_) = 0;
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

v1::ModelInfo FakeModelInfo() {
  v1::ModelInfo info;
  info.set_name("fake");
  info.set_model_type("llama");
  info.set_vocab_size(100);
  info.set_num_layers(2);
  info.set_num_kv_heads(2);
  info.set_head_dim(8);
  info.set_max_position_embeddings(64);
  for (int i = 0; i < 2; ++i) info.add_layers()->set_type("full_attention");
  info.add_eos_token_ids(2);
  info.set_bos_token_id(1);
  info.set_dtype("float32");
  info.set_device("cpu");
  info.set_max_new_tokens_limit(32);
  return info;
}

v1::Sequence FakeSequence(const v1::GenerateRequest& request, int32_t index, int32_t n) {
  v1::Sequence sequence;
  sequence.set_index(index);
  for (int32_t j = 0; j < n; ++j) {
    AddToken(request, index, j, *sequence.mutable_text(), *sequence.mutable_token_ids(),
             *sequence.mutable_logprobs());
  }
  sequence.set_finish_reason(FakeFinishReason(request, index));
  if (request.sampling().num_beams() > 1) sequence.set_score(-0.5 * (index + 1));
  return sequence;
}

grpc::ServerUnaryReactor* FakeGenerationService::Generate(grpc::CallbackServerContext* context,
                                                          const v1::GenerateRequest* request,
                                                          v1::GenerateResponse* response) {
  replica_->Serve(context);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (request->input_case() == v1::GenerateRequest::INPUT_NOT_SET) {
    reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                 "input: one of prompt, token_ids, messages is required"));
    return reactor;
  }
  const int32_t n = MaxNewTokens(*request);
  const int32_t sequences = NumSequences(*request);
  for (int32_t i = 0; i < sequences; ++i) {
    *response->add_sequences() = FakeSequence(*request, i, n);
  }
  response->set_text(response->sequences(0).text());
  *response->mutable_token_ids() = response->sequences(0).token_ids();
  response->set_finish_reason(response->sequences(0).finish_reason());
  reactor->Finish(ToGrpc(Report(*request, n * sequences, *sessions_, *response->mutable_usage(),
                                *response->mutable_cache_report())));
  return reactor;
}

grpc::ServerWriteReactor<v1::GenerateStreamResponse>* FakeGenerationService::GenerateStream(
    grpc::CallbackServerContext* context, const v1::GenerateRequest* request) {
  replica_->Serve(context);
  return new StreamReactor(*request, *sessions_);
}

grpc::ServerUnaryReactor* FakeGenerationService::Tokenize(grpc::CallbackServerContext* context,
                                                          const v1::TokenizeRequest* request,
                                                          v1::TokenizeResponse* response) {
  replica_->Serve(context);
  if (!request->has_add_special_tokens() || request->add_special_tokens()) {
    response->add_token_ids(1);
  }
  for (unsigned char c : request->text()) response->add_token_ids(c);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* FakeGenerationService::GetModelInfo(
    grpc::CallbackServerContext* context, const v1::GetModelInfoRequest* request,
    v1::ModelInfo* response) {
  replica_->Serve(context);
  *response = FakeModelInfo();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* FakeHealthService::Check(
    grpc::CallbackServerContext* context, const grpc::health::v1::HealthCheckRequest* request,
    grpc::health::v1::HealthCheckResponse* response) {
  replica_->Serve(context);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (!request->service().empty()) {
    reactor->Finish(grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown service"));
    return reactor;
  }
  response->set_status(status_);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

FakeServer::FakeServer(std::string replica_id, std::shared_ptr<grpc::ServerCredentials> credentials)
    : replica_(std::move(replica_id)) {
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0",
                           credentials != nullptr ? credentials : grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterService(&generation_);
  builder.RegisterService(&prefix_cache_);
  builder.RegisterService(&sessions_);
  builder.RegisterService(&health_);
  server_ = builder.BuildAndStart();
  target_ = absl::StrCat("127.0.0.1:", port);
}

FakeServer::~FakeServer() { server_->Shutdown(); }

}  // namespace kvserve::client::testing
