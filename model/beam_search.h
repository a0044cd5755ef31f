// Beam search as Transformers' generate(num_beams=...) runs it (its BeamSearchScorer and
// BeamHypotheses), and token log-probabilities. Pure host arithmetic on rows of logits: the
// caller runs the model and moves the cache rows as each step says.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace kvserve::model {

// A token and the natural log of its probability.
struct TokenLogprob {
  int32_t token_id = 0;
  float logprob = 0.0f;
};

// One generated position: the chosen token's log-probability and the most likely tokens.
struct PositionLogprobs {
  TokenLogprob chosen;
  std::vector<TokenLogprob> top;  // most likely first; ties: lower id first
};

// log_softmax of `logits` into `out` (resized), accumulated in double. NaN counts as -inf.
void LogSoftmax(absl::Span<const float> logits, std::vector<float>* out);

// The chosen token's log-probability and the `k` most likely of `log_probs` (k <= size).
PositionLogprobs LogprobsAt(absl::Span<const float> log_probs, int32_t token, int k);

// Transformers' GenerationConfig.early_stopping.
enum class EarlyStopping {
  kFalse,  // stop when no running beam can beat the worst finished one at the current length
  kTrue,   // stop as soon as num_beams hypotheses are finished
  kNever,  // stop only when no running beam can beat them at any reachable length
};

struct BeamSearchOptions {
  int num_beams = 1;             // >= 1
  int num_return_sequences = 1;  // in [1, num_beams]
  EarlyStopping early_stopping = EarlyStopping::kFalse;
  double length_penalty = 1.0;
  int64_t max_new_tokens = 1;  // >= 1: the search ends after this many steps
  // Tokens that end a beam (end-of-sequence ids and stop token ids; empty with ignore_eos).
  std::vector<int32_t> end_token_ids;
  // Transformers' repetition penalty, applied to the log-probabilities over each beam's
  // context (prompt + its tokens); 1 = off.
  double repetition_penalty = 1.0;
  // Record each generated token's log-probability, with the top_logprobs most likely
  // (top_logprobs < 0: record nothing).
  int top_logprobs = -1;

  // InvalidArgument naming the first offending field.
  absl::Status Validate() const;
};

// One finished sequence.
struct BeamHypothesis {
  std::vector<int32_t> tokens;  // generated tokens (the end token included when it ended)
  double score = 0;             // sum of log-probabilities / generated length^length_penalty
  bool ended = false;           // ended with an end token (else it reached max_new_tokens)
  std::vector<PositionLogprobs> logprobs;  // per token, when recorded
};

// Not thread-safe; one per request.
class BeamSearch {
 public:
  // `options` must pass Validate(). `prompt` is the context of the repetition penalty.
  BeamSearch(BeamSearchOptions options, std::vector<int32_t> prompt);

  // What the caller does after a step: the cache's row i becomes old row parents[i] (Reorder;
  // after the first step, RepeatInterleave(num_beams) already gives it), and row i runs
  // tokens[i] next. Empty when done.
  struct Step {
    std::vector<int64_t> parents;
    std::vector<int32_t> tokens;
    bool done = false;
  };

  // Scores one step. `logits`: rows() rows of `vocab` float32 logits, row after row (the
  // first step: one row, the prompt's last position). Candidates are the best
  // max(2, 1 + ends) * num_beams (beam, token) pairs; ties go to the lower beam, then the
  // lower token. InvalidArgument on a shape mismatch.
  absl::Status Advance(absl::Span<const float> logits, int64_t vocab, Step* step);

  // Rows the next Advance expects: 1 before the first step, num_beams after.
  int64_t rows() const { return static_cast<int64_t>(beams_.size()); }
  // Steps run so far.
  int64_t steps() const { return steps_; }
  bool done() const { return done_; }

  // The best num_return_sequences hypotheses, best first (running beams are added first when
  // the search ended by length). Call once, after the last Advance.
  std::vector<BeamHypothesis> Finalize();

 private:
  struct Beam {
    std::vector<int32_t> tokens;
    double score = 0;
    std::vector<PositionLogprobs> logprobs;
  };
  // Adds a finished hypothesis (BeamHypotheses.add).
  void AddHypothesis(BeamHypothesis hypothesis, double sum_logprobs, int64_t generated_len);
  // BeamHypotheses.is_done for the best candidate score of the step just run.
  bool IsDone(double best_sum_logprobs, int64_t generated_len) const;
  bool IsEndToken(int32_t token) const;

  BeamSearchOptions options_;
  std::vector<int32_t> prompt_;
  std::vector<Beam> beams_;
  std::vector<BeamHypothesis> hypotheses_;  // insertion order
  double worst_score_ = 1e9;
  int64_t steps_ = 0;
  bool scorer_done_ = false;  // the early-stopping rule ended it (else the length did)
  bool done_ = false;
  bool finalized_ = false;
  // Scratch reused between steps.
  std::vector<float> log_probs_;  // rows x vocab
  std::vector<uint8_t> seen_;     // repetition-penalty marks
};

}  // namespace kvserve::model
