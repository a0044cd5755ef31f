// RequestOutput: one request's decoding state once admitted (its sampler or samplers, beam
// search, detokenizers, stop strings, log-probabilities) and the hand-out of what each step
// produced to the request's sink.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cache/kv_cache_manager.h"
#include "model/beam_search.h"
#include "model/sampler.h"
#include "server/generation_request.h"
#include "server/request_sink.h"
#include "server/stop_string_matcher.h"

namespace at {
class Tensor;
}  // namespace at

namespace kvserve::constraint {
class SequenceConstraint;
}  // namespace kvserve::constraint

namespace kvserve::tokenizer {
class IncrementalDetokenizer;
class Tokenizer;
}  // namespace kvserve::tokenizer

namespace kvserve::server {

// What decoding needs to know of the model.
struct OutputModel {
  std::vector<int32_t> eos_token_ids;
  int64_t vocab_size = 0;
  // Most tokens a constraint may force after one sampled token (jump-forward); 0: off.
  int max_forced_tokens = 16;
  // Null: outputs carry token ids and no text. Must outlive every RequestOutput.
  const tokenizer::Tokenizer* tokenizer = nullptr;
};

// What one step's logits did to a request.
struct OutputStep {
  // The request ended (every sequence of it).
  std::optional<FinishReason> finished;
  // How its cache's rows change before the next step, in order (beams' reorder; samples
  // expanding from the prompt's row, then finished ones leaving).
  std::vector<cache::RowChange> row_changes;
  // The rows the request decodes in from now on, when that changed (the scheduler's).
  std::optional<int64_t> new_rows;
  // Tokens sampled in this step, over every row.
  int64_t tokens_sampled = 0;
  // One-row requests under a constraint: tokens appended after the sampled one without
  // sampling (jump-forward); the next step runs them with it.
  int64_t forced_tokens = 0;
};

// Engine thread only. Built at admission; fed each step's logits; ended by finish or cut.
class RequestOutput {
 public:
  // Samplers or beams for `request` (the one-row prompt `prompt`, a session turn's history
  // included). InvalidArgument "sampling: ..." when its sampling or beam options are refused.
  static absl::StatusOr<std::unique_ptr<RequestOutput>> Start(const GenerationRequest& request,
                                                              std::vector<int32_t> prompt,
                                                              const OutputModel* model,
                                                              RequestSink* sink);
  ~RequestOutput();

  // The next forward's input: one row's prompt and generated tokens (one-row requests, and a
  // multi-row request before its first token), or one token per row.
  bool multi_row() const { return beams_ != nullptr || !samples_.empty(); }
  bool decoding_rows() const { return multi_row() && num_generated_ > 0; }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  const std::vector<int32_t>& row_tokens() const { return row_tokens_; }
  int64_t rows() const { return rows_; }

  // One step's logits: [vocab] for one row, [rows, vocab] for several. Samples, hands out text,
  // token ids and log-probabilities, and says what changed. Internal when the logits do not
  // have the request's rows.
  absl::StatusOr<OutputStep> OnLogits(const at::Tensor& logits);
  // Ends every sequence still running with `cut` (a shutdown or a cancel of a multi-row
  // request): beam search hands out its best hypotheses, samples and a single sequence what
  // their detokenizers and stop matchers held back. The request's finish reason.
  FinishReason Cut(FinishReason cut);

  // Steps that sampled.
  int64_t num_generated() const { return num_generated_; }
  // Tokens handed out over every returned sequence.
  int64_t completion_tokens() const { return multi_row() ? completion_tokens_ : num_generated_; }
  // Of those, tokens a constraint forced (jump-forward).
  int64_t forced_tokens() const { return forced_tokens_; }

 private:
  struct Sample;

  RequestOutput(const GenerationRequest& request, std::vector<int32_t> prompt,
                const OutputModel* model, RequestSink* sink);
  absl::StatusOr<OutputStep> StepOneRow(const at::Tensor& logits);
  absl::StatusOr<OutputStep> StepBeams(absl::Span<const float> all);
  absl::StatusOr<OutputStep> StepSamples(absl::Span<const float> all);
  // Beam search's best hypotheses, each handed out whole with its score; the finish reason
  // of the first.
  FinishReason EndBeams(FinishReason cut);
  // Why a sequence that just generated `token` (its num_generated-th) ends, if it does.
  std::optional<FinishReason> EndAfter(int32_t token, int64_t num_generated) const;
  // The text `token` makes final through the detokenizer and stop matcher; at the end of the
  // sequence (`reason` set) what they held back too. A matched stop string sets reason.
  std::string TextOf(tokenizer::IncrementalDetokenizer* detokenizer, StopStringMatcher& stop,
                     int32_t token, std::optional<FinishReason>* reason) const;
  // The log-probabilities of `token` under the logits `row` when the request asks for them.
  std::vector<model::PositionLogprobs> LogprobsOf(absl::Span<const float> row, int32_t token);
  // `row` with the constraint's mask of `constraint_row` applied (into masked_), or `row`
  // itself without a constraint. *allowed: some token may come next.
  absl::Span<const float> Masked(int constraint_row, absl::Span<const float> row, bool* allowed);
  // After a constrained row took `token`: a complete value with nothing more allowed ends the
  // sequence (kStop), and a row the constraint could not follow is an Internal error.
  absl::Status AfterConstrained(int constraint_row, int32_t token,
                                std::optional<FinishReason>* reason);

  const GenerationRequest& request_;
  const OutputModel* const model_;
  RequestSink* const sink_;
  // One-row requests: the sampler, detokenizer (null without a tokenizer) and stop matcher.
  std::unique_ptr<model::Sampler> sampler_;
  std::unique_ptr<tokenizer::IncrementalDetokenizer> detokenizer_;
  StopStringMatcher stop_;
  std::vector<int32_t> tokens_;  // the prompt, then every generated token of the one row
  int64_t num_generated_ = 0;
  // Several rows: beams, or independent samples (row i runs row_tokens_[i] next).
  std::unique_ptr<model::BeamSearch> beams_;
  std::vector<Sample> samples_;
  std::vector<int> row_sample_;  // per cache row: its sample
  std::vector<int32_t> row_tokens_;
  int64_t rows_ = 1;
  int64_t completion_tokens_ = 0;
  std::vector<float> log_probs_;  // scratch
  // The output constraint's state: one row per sample, per beam, or the one row; null
  // without a constraint.
  std::unique_ptr<constraint::SequenceConstraint> constraint_;
  std::vector<float> masked_;  // scratch: logits under the mask
  int64_t forced_tokens_ = 0;
};

}  // namespace kvserve::server
