// ResponseChannel: the RequestSink of an HTTP request; the engine thread puts each output in,
// the HTTP worker that serves the request takes them out (waiting with a timeout, so that it
// can watch its client in between).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/generation_request.h"
#include "server/request_sink.h"

namespace kvserve::server::http_api {

// One SequenceOutput, copied (the engine's views die when OnOutput returns).
struct SequenceDelta {
  int index = 0;
  std::string text;
  std::vector<int32_t> token_ids;
  std::vector<model::PositionLogprobs> logprobs;
  std::optional<FinishReason> finish;
};

// What Take hands over: the outputs since the previous Take, and the end when it came.
struct ChannelBatch {
  std::vector<SequenceDelta> deltas;
  std::optional<GenerationSummary> summary;  // the request finished
  std::optional<absl::Status> error;         // the request failed
  bool ended() const { return summary.has_value() || error.has_value(); }
};

// Thread-safe: the engine calls the RequestSink methods, one consumer calls Take.
class ResponseChannel final : public RequestSink {
 public:
  void OnOutput(const SequenceOutput& output) override;
  void OnFinish(const GenerationSummary& summary) override;
  void OnError(const absl::Status& status) override;

  // Waits up to `timeout` for output or the end, then takes everything pending (possibly
  // nothing). After the batch that ended the request, every batch is empty and ended.
  ChannelBatch Take(absl::Duration timeout);

 private:
  absl::Mutex mu_;
  ChannelBatch pending_ ABSL_GUARDED_BY(mu_);
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  // The terminal event, kept for the batches after the one that carried it.
  std::optional<absl::Status> error_ ABSL_GUARDED_BY(mu_);
  std::optional<GenerationSummary> summary_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvserve::server::http_api
