// FakeServer: an in-process kvserve look-alike on 127.0.0.1:0 with fixed, predictable answers,
// for testing the client library and kvctl's commands (bench, prefix, session, chat) without
// the engine.
#pragma once

#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "fake_prefix_cache_service.h"
#include "fake_replica.h"
#include "fake_sessions_service.h"
#include "grpc_health/v1/health.grpc.pb.h"
#include "kvserve/v1/generation.grpc.pb.h"

namespace kvserve::client::testing {

// The fake's model: vocab_size 100, bos 1, eos {2}, context 64 tokens, max_new_tokens_limit 32.
v1::ModelInfo FakeModelInfo();

// Sequence `index` of `n` tokens the fake generates for `request`: token j is 10 + 10 * index +
// j, its text "t<j>" (sequence 0) or "s<index>t<j>"; finish LENGTH for sequence 0, EOS for the
// others; score -0.5 * (index + 1) when num_beams > 1; with sampling.logprobs, token j's
// logprob is -0.25 * (j + 1) and its top_logprobs entries are token id + k with that logprob
// minus k, for k = 0, 1, ...
v1::Sequence FakeSequence(const v1::GenerateRequest& request, int32_t index, int32_t n);

// Generation:
// - Generate: no input is INVALID_ARGUMENT "input: ..."; otherwise max_new_tokens (unset: 3)
//   tokens 10, 11, ..., text "t0t1...", finish LENGTH, usage.prompt_tokens = the number of
//   token ids (or prompt bytes, or the messages' content bytes plus one per message). Prompt
//   "drain": every sequence finishes CANCELLED instead, as when kvserve's shutdown cuts it off.
//   With `session`: a turn of `sessions`' session (NOT_FOUND for an unknown one), whose
//   cached_tokens its answer carries, and cache_report.session the id.
//   Every answer lists its sequences (FakeSequence): num_return_sequences (unset: 1) of them,
//   sequence 0 the tokens above; completion_tokens counts them all.
// - GenerateStream: the same tokens, one message each, the last one also carrying finish
//   reason and usage. Prompt "hang": one message, then nothing until the client cancels.
//   Several sequences: token by token, one message per sequence (index), interleaved, each
//   sequence's last message with its finish reason. num_beams > 1: nothing until the end,
//   then each sequence whole in one message (with its score), best first.
//   cache_implementation "unknown": INVALID_ARGUMENT naming cache.cache_implementation.
// - Tokenize: one id per byte of text (the byte's value), BOS first unless
//   add_special_tokens=false.
// - GetModelInfo: FakeModelInfo().
// Every call is served as `replica` (its routing key and authorization metadata logged, the
// replica's id sent back).
class FakeGenerationService final : public v1::Generation::CallbackService {
 public:
  // Neither is owned; both outlive this.
  FakeGenerationService(FakeReplica* replica, FakeSessionsService* sessions)
      : replica_(replica), sessions_(sessions) {}

  grpc::ServerUnaryReactor* Generate(grpc::CallbackServerContext* context,
                                     const v1::GenerateRequest* request,
                                     v1::GenerateResponse* response) override;
  grpc::ServerWriteReactor<v1::GenerateStreamResponse>* GenerateStream(
      grpc::CallbackServerContext* context, const v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const v1::TokenizeRequest* request,
                                     v1::TokenizeResponse* response) override;
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* context,
                                         const v1::GetModelInfoRequest* request,
                                         v1::ModelInfo* response) override;

 private:
  FakeReplica* const replica_;
  FakeSessionsService* const sessions_;
};

// Health.Check answers `status` for the empty service name, NOT_FOUND for any other; served as
// `replica`.
class FakeHealthService final : public grpc::health::v1::Health::CallbackService {
 public:
  FakeHealthService(FakeReplica* replica,
                    grpc::health::v1::HealthCheckResponse::ServingStatus status)
      : replica_(replica), status_(status) {}
  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* context,
                                  const grpc::health::v1::HealthCheckRequest* request,
                                  grpc::health::v1::HealthCheckResponse* response) override;

 private:
  FakeReplica* const replica_;  // not owned
  grpc::health::v1::HealthCheckResponse::ServingStatus status_;
};

// The fakes (Generation, PrefixCache, Sessions, Health) served on 127.0.0.1 at a free port until
// destroyed, as one replica called `replica_id`, over `credentials` (null: plaintext).
class FakeServer {
 public:
  static constexpr char kDefaultReplicaId[] = "fake-replica";

  explicit FakeServer(std::string replica_id = kDefaultReplicaId,
                      std::shared_ptr<grpc::ServerCredentials> credentials = nullptr);
  ~FakeServer();
  // "127.0.0.1:PORT".
  std::string target() const { return target_; }
  // The PrefixCache fake, to see what the client sent.
  const FakePrefixCacheService& prefix_cache() const { return prefix_cache_; }
  // The Sessions fake, to see what the client sent.
  const FakeSessionsService& sessions() const { return sessions_; }
  // The replica every fake serves as, to see the routing keys and authorization metadata the
  // client sent.
  const FakeReplica& replica() const { return replica_; }

 private:
  FakeReplica replica_;
  FakeSessionsService sessions_{&replica_};
  FakeGenerationService generation_{&replica_, &sessions_};
  FakePrefixCacheService prefix_cache_{&replica_};
  FakeHealthService health_{&replica_, grpc::health::v1::HealthCheckResponse::SERVING};
  std::unique_ptr<grpc::Server> server_;
  std::string target_;
};

}  // namespace kvserve::client::testing
