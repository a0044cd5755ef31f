// Beam search with Transformers' scorer rules, and log-probabilities of tokens.
#include "model/beam_search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace kvserve::model {
namespace {

// log(0): the log-probability of a token that cannot follow.
constexpr float kLogZero = -std::numeric_limits<float>::infinity();

// The higher score first; equal scores: the lower index first.
struct ByScore {
  const float* scores;
  bool operator()(int32_t a, int32_t b) const {
    if (scores[a] != scores[b]) return scores[a] > scores[b];
    return a < b;
  }
};

}  // namespace

void LogSoftmax(absl::Span<const float> logits, std::vector<float>* out) {
  out->resize(logits.size());
  double max = -std::numeric_limits<double>::infinity();
  for (float x : logits) {
    if (!std::isnan(x)) max = std::max(max, static_cast<double>(x));
  }
  if (std::isinf(max)) {
    // No finite logit: nothing is likelier than anything else.
    const float uniform = -std::log(static_cast<float>(logits.size()));
    for (size_t i = 0; i < logits.size(); ++i) {
      (*out)[i] = max > 0 && logits[i] == std::numeric_limits<float>::infinity() ? 0.0f : uniform;
    }
    return;
  }
  double sum = 0;
  for (float x : logits) {
    if (!std::isnan(x)) sum += std::exp(static_cast<double>(x) - max);
  }
  const double log_sum = std::log(sum) + max;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float x = logits[i];
    (*out)[i] = std::isnan(x) ? kLogZero : static_cast<float>(static_cast<double>(x) - log_sum);
  }
}

PositionLogprobs LogprobsAt(absl::Span<const float> log_probs, int32_t token, int k) {
  PositionLogprobs position;
  position.chosen = {token, log_probs[token]};
  k = std::min<int>(k, static_cast<int>(log_probs.size()));
  if (k <= 0) return position;
  std::vector<int32_t> ids(log_probs.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), ByScore{log_probs.data()});
  position.top.reserve(k);
  for (int i = 0; i < k; ++i) position.top.push_back({ids[i], log_probs[ids[i]]});
  return position;
}

absl::Status BeamSearchOptions::Validate() const {
  if (num_beams < 1) {
    return absl::InvalidArgumentError(absl::StrCat("num_beams must be >= 1, got ", num_beams));
  }
  if (num_return_sequences < 1 || num_return_sequences > num_beams) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_return_sequences must be in [1, num_beams = ", num_beams, "], got ",
                     num_return_sequences));
  }
  if (!std::isfinite(length_penalty)) {
    return absl::InvalidArgumentError("length_penalty must be finite");
  }
  if (max_new_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_new_tokens must be >= 1, got ", max_new_tokens));
  }
  if (!(repetition_penalty > 0.0 && std::isfinite(repetition_penalty))) {
    return absl::InvalidArgumentError(
        absl::StrCat("repetition_penalty must be > 0, got ", repetition_penalty));
  }
  return absl::OkStatus();
}

BeamSearch::BeamSearch(BeamSearchOptions options, std::vector<int32_t> prompt)
    : options_(std::move(options)), prompt_(std::move(prompt)) {
  // The first step scores the prompt's one row: Transformers' num_beams copies of it with
  // scores [0, -1e9, ...] choose the same candidates whenever vocab >= 2 * num_beams.
  beams_.resize(1);
}

bool BeamSearch::IsEndToken(int32_t token) const {
  return std::find(options_.end_token_ids.begin(), options_.end_token_ids.end(), token) !=
         options_.end_token_ids.end();
}

void BeamSearch::AddHypothesis(BeamHypothesis hypothesis, double sum_logprobs,
                               int64_t generated_len) {
  const double score =
      sum_logprobs / std::pow(static_cast<double>(generated_len), options_.length_penalty);
  const auto capacity = static_cast<size_t>(options_.num_beams);
  if (hypotheses_.size() >= capacity && score <= worst_score_) return;
  hypothesis.score = score;
  hypotheses_.push_back(std::move(hypothesis));
  if (hypotheses_.size() > capacity) {
    // Drop the lowest score (the earliest added among equals); the next lowest is the worst.
    std::vector<size_t> order(hypotheses_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return hypotheses_[a].score < hypotheses_[b].score;
    });
    worst_score_ = hypotheses_[order[1]].score;
    hypotheses_.erase(hypotheses_.begin() + static_cast<std::ptrdiff_t>(order[0]));
  } else {
    worst_score_ = std::min(score, worst_score_);
  }
}

bool BeamSearch::IsDone(double best_sum_logprobs, int64_t generated_len) const {
  if (hypotheses_.size() < static_cast<size_t>(options_.num_beams)) return false;
  const double lp = options_.length_penalty;
  switch (options_.early_stopping) {
    case EarlyStopping::kTrue:
      return true;
    case EarlyStopping::kFalse:
      return worst_score_ >= best_sum_logprobs / std::pow(static_cast<double>(generated_len), lp);
    case EarlyStopping::kNever: {
      // With a positive penalty the longest reachable length gives the highest score.
      const int64_t length = lp > 0 ? options_.max_new_tokens : generated_len;
      return worst_score_ >= best_sum_logprobs / std::pow(static_cast<double>(length), lp);
    }
  }
  return false;
}

absl::Status BeamSearch::Advance(absl::Span<const float> logits, int64_t vocab, Step* step) {
  *step = Step{};
  if (done_) return absl::FailedPreconditionError("the beam search is over");
  const int64_t rows = this->rows();
  if (vocab < 1 || static_cast<int64_t>(logits.size()) != rows * vocab) {
    return absl::InvalidArgumentError(absl::StrCat("beam search expects ", rows, " rows of ", vocab,
                                                   " logits, got ", logits.size()));
  }
  const int64_t num_beams = options_.num_beams;
  const int64_t keep =
      std::max<int64_t>(2, 1 + static_cast<int64_t>(options_.end_token_ids.size())) * num_beams;
  if (rows * vocab < keep) {
    return absl::InvalidArgumentError(absl::StrCat(
        "beam search needs ", keep, " candidates per step, the vocabulary has ", vocab));
  }
  // Candidate scores: each beam's score plus the processed log-probabilities of its row.
  log_probs_.resize(rows * vocab);
  std::vector<float> scores(rows * vocab);
  std::vector<float> row;
  for (int64_t r = 0; r < rows; ++r) {
    LogSoftmax(logits.subspan(r * vocab, vocab), &row);
    std::copy(row.begin(), row.end(), log_probs_.begin() + r * vocab);
    if (options_.repetition_penalty != 1.0) {
      // Transformers' processor on log-probabilities (all <= 0: multiplied), each id once.
      const auto penalty = static_cast<float>(options_.repetition_penalty);
      seen_.assign(vocab, 0);
      auto penalise = [&](int32_t id) {
        if (id < 0 || id >= vocab || seen_[id]) return;
        seen_[id] = 1;
        const float x = row[id];
        row[id] = x < 0 ? x * penalty : x / penalty;
      };
      for (int32_t id : prompt_) penalise(id);
      for (int32_t id : beams_[r].tokens) penalise(id);
    }
    const double base = beams_[r].score;
    for (int64_t t = 0; t < vocab; ++t) {
      scores[r * vocab + t] = static_cast<float>(base + static_cast<double>(row[t]));
    }
  }
  // Ranked in float32, as Transformers' score tensors are.
  std::vector<int32_t> order(rows * vocab);
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::partial_sort(order.begin(), order.begin() + keep, order.end(), ByScore{scores.data()});

  ++steps_;
  std::vector<Beam> next;
  next.reserve(num_beams);
  const bool record = options_.top_logprobs >= 0;
  for (int64_t rank = 0; rank < keep && static_cast<int64_t>(next.size()) < num_beams; ++rank) {
    const int32_t candidate = order[rank];
    const int64_t parent = candidate / vocab;
    const auto token = static_cast<int32_t>(candidate % vocab);
    const Beam& from = beams_[parent];
    const double score = static_cast<double>(scores[candidate]);
    PositionLogprobs position;
    if (record) {
      position = LogprobsAt(absl::Span<const float>(log_probs_).subspan(parent * vocab, vocab),
                            token, options_.top_logprobs);
    }
    if (IsEndToken(token)) {
      // An end token ranked below the best num_beams candidates is not a hypothesis.
      if (rank >= num_beams) continue;
      BeamHypothesis hypothesis;
      hypothesis.tokens = from.tokens;
      hypothesis.tokens.push_back(token);
      hypothesis.ended = true;
      if (record) {
        hypothesis.logprobs = from.logprobs;
        hypothesis.logprobs.push_back(std::move(position));
      }
      AddHypothesis(std::move(hypothesis), score, steps_);
      continue;
    }
    Beam beam;
    beam.tokens = from.tokens;
    beam.tokens.push_back(token);
    beam.score = score;
    if (record) {
      beam.logprobs = from.logprobs;
      beam.logprobs.push_back(std::move(position));
    }
    next.push_back(std::move(beam));
    step->parents.push_back(parent);
    step->tokens.push_back(token);
  }
  if (static_cast<int64_t>(next.size()) < num_beams) {
    return absl::InternalError(absl::StrCat("beam search found ", next.size(), " of ", num_beams,
                                            " beams to continue among ", keep, " candidates"));
  }
  beams_ = std::move(next);
  scorer_done_ = scorer_done_ || IsDone(static_cast<double>(scores[order[0]]), steps_);
  done_ = scorer_done_ || steps_ >= options_.max_new_tokens;
  step->done = done_;
  if (done_) {
    step->parents.clear();
    step->tokens.clear();
  }
  return absl::OkStatus();
}

std::vector<BeamHypothesis> BeamSearch::Finalize() {
  if (steps_ == 0) return {};  // nothing generated yet
  if (!finalized_ && !scorer_done_) {
    // Ended by length: the running beams are candidates too, in beam order.
    for (Beam& beam : beams_) {
      BeamHypothesis hypothesis;
      hypothesis.tokens = beam.tokens;
      hypothesis.logprobs = beam.logprobs;
      AddHypothesis(std::move(hypothesis), beam.score, steps_);
    }
  }
  finalized_ = true;
  // Highest score first; among equal scores the later added first (Transformers sorts
  // ascending, stably, and pops from the end).
  std::vector<size_t> order(hypotheses_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return hypotheses_[a].score < hypotheses_[b].score; });
  std::vector<BeamHypothesis> best;
  const size_t n = std::min<size_t>(options_.num_return_sequences, order.size());
  for (size_t j = 0; j < n; ++j) best.push_back(hypotheses_[order[order.size() - 1 - j]]);
  return best;
}

}  // namespace kvserve::model
