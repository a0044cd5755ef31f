// ResponseChannel: engine outputs handed to an HTTP worker.
#include "server/http_api/response_channel.h"

#include <utility>

namespace kvserve::server::http_api {

void ResponseChannel::OnOutput(const SequenceOutput& output) {
  absl::MutexLock lock(&mu_);
  std::vector<SequenceDelta>& deltas = pending_.deltas;
  // Consecutive pieces of one running sequence merge, so a slow reader gets fewer, larger
  // pieces.
  if (deltas.empty() || deltas.back().index != output.index || deltas.back().finish) {
    deltas.emplace_back();
    deltas.back().index = output.index;
  }
  SequenceDelta& delta = deltas.back();
  delta.text.append(output.text.data(), output.text.size());
  delta.token_ids.insert(delta.token_ids.end(), output.token_ids.begin(), output.token_ids.end());
  delta.logprobs.insert(delta.logprobs.end(), output.logprobs.begin(), output.logprobs.end());
  delta.finish = output.finish;
}

void ResponseChannel::OnFinish(const GenerationSummary& summary) {
  absl::MutexLock lock(&mu_);
  ended_ = true;
  summary_ = summary;
  pending_.summary = summary;
}

void ResponseChannel::OnError(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  ended_ = true;
  error_ = status;
  pending_.error = status;
}

ChannelBatch ResponseChannel::Take(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return ended_ || !pending_.deltas.empty();
  };
  mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
  ChannelBatch batch = std::move(pending_);
  pending_ = ChannelBatch();
  if (ended_) {
    batch.summary = summary_;
    batch.error = error_;
  }
  return batch;
}

}  // namespace kvserve::server::http_api
