// One request's decoding state and output (see request_output.h).
#include "server/request_output.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "constraint/token_constraint.h"
#include "tokenizer/incremental_detokenizer.h"

namespace kvserve::server {
namespace {

// A float32 CPU row of logits as a span (made contiguous first when it is not).
absl::Span<const float> FloatRow(const at::Tensor& logits, at::Tensor* holder) {
  *holder = logits.to(at::kFloat).contiguous();
  return {holder->data_ptr<float>(), static_cast<size_t>(holder->numel())};
}

bool Contains(absl::Span<const int32_t> ids, int32_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

}  // namespace

// One returned sequence drawn independently.
struct RequestOutput::Sample {
  std::unique_ptr<model::Sampler> sampler;
  std::unique_ptr<tokenizer::IncrementalDetokenizer> detokenizer;  // null without a tokenizer
  StopStringMatcher stop;
  std::vector<int32_t> context;  // prompt + its tokens (the repetition penalty's)
  int64_t num_generated = 0;
  std::optional<FinishReason> finish;
};

RequestOutput::RequestOutput(const GenerationRequest& request, std::vector<int32_t> prompt,
                             const OutputModel* model, RequestSink* sink)
    : request_(request),
      model_(model),
      sink_(sink),
      stop_(request.stop_strings),
      tokens_(std::move(prompt)) {}

RequestOutput::~RequestOutput() = default;

absl::StatusOr<std::unique_ptr<RequestOutput>> RequestOutput::Start(const GenerationRequest& r,
                                                                    std::vector<int32_t> prompt,
                                                                    const OutputModel* model,
                                                                    RequestSink* sink) {
  if (absl::Status sampling = r.sampling.Validate(); !sampling.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("sampling: ", sampling.message()));
  }
  std::unique_ptr<RequestOutput> out(new RequestOutput(r, std::move(prompt), model, sink));
  if (r.constraint != nullptr) {
    // Samples keep their row by sample index; beams start from the prompt's one row.
    const int rows = r.num_beams <= 1 && r.num_return_sequences > 1 ? r.num_return_sequences : 1;
    out->constraint_ = std::make_unique<constraint::SequenceConstraint>(r.constraint, rows);
  }
  auto detokenizer = [model]() -> std::unique_ptr<tokenizer::IncrementalDetokenizer> {
    if (model->tokenizer == nullptr) return nullptr;
    return std::make_unique<tokenizer::IncrementalDetokenizer>(model->tokenizer,
                                                               /*skip_special_tokens=*/true);
  };
  if (r.num_beams > 1) {
    model::BeamSearchOptions options{.num_beams = r.num_beams,
                                     .num_return_sequences = r.num_return_sequences,
                                     .early_stopping = r.early_stopping,
                                     .length_penalty = r.length_penalty,
                                     .max_new_tokens = r.max_new_tokens,
                                     .end_token_ids = r.stop_token_ids,
                                     .repetition_penalty = r.sampling.repetition_penalty,
                                     .top_logprobs = r.top_logprobs};
    if (!r.ignore_eos) {
      for (int32_t eos : model->eos_token_ids) {
        if (!Contains(options.end_token_ids, eos)) options.end_token_ids.push_back(eos);
      }
    }
    if (absl::Status valid = options.Validate(); !valid.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("sampling: ", valid.message()));
    }
    out->beams_ = std::make_unique<model::BeamSearch>(std::move(options), out->tokens_);
    return out;
  }
  if (r.num_return_sequences > 1) {
    out->samples_.resize(r.num_return_sequences);
    for (int i = 0; i < r.num_return_sequences; ++i) {
      Sample& sample = out->samples_[i];
      model::SamplingParams params = r.sampling;
      params.seed = r.sampling.seed + static_cast<uint64_t>(i);
      sample.sampler = std::make_unique<model::Sampler>(params);
      sample.stop = StopStringMatcher(r.stop_strings);
      sample.context = out->tokens_;
      sample.detokenizer = detokenizer();
    }
    return out;
  }
  out->sampler_ = std::make_unique<model::Sampler>(r.sampling);
  out->detokenizer_ = detokenizer();
  return out;
}

std::optional<FinishReason> RequestOutput::EndAfter(int32_t token, int64_t num_generated) const {
  if (!request_.ignore_eos && Contains(model_->eos_token_ids, token)) return FinishReason::kEos;
  if (Contains(request_.stop_token_ids, token)) return FinishReason::kStop;
  if (num_generated >= request_.max_new_tokens) return FinishReason::kLength;
  return std::nullopt;
}

std::string RequestOutput::TextOf(tokenizer::IncrementalDetokenizer* detokenizer,
                                  StopStringMatcher& stop, int32_t token,
                                  std::optional<FinishReason>* reason) const {
  std::string text = stop.Feed(detokenizer != nullptr ? detokenizer->Add(token) : "");
  if (stop.matched()) {
    *reason = FinishReason::kStop;
    return text;
  }
  if (*reason) {
    // The end of the stream: release what the detokenizer and the stop matcher held back.
    if (detokenizer != nullptr) text += stop.Feed(detokenizer->Finish());
    if (stop.matched()) *reason = FinishReason::kStop;
    text += stop.Flush();
  }
  return text;
}

std::vector<model::PositionLogprobs> RequestOutput::LogprobsOf(absl::Span<const float> row,
                                                               int32_t token) {
  std::vector<model::PositionLogprobs> out;
  if (request_.top_logprobs < 0) return out;
  model::LogSoftmax(row, &log_probs_);
  out.push_back(model::LogprobsAt(log_probs_, token, request_.top_logprobs));
  return out;
}

absl::Span<const float> RequestOutput::Masked(int constraint_row, absl::Span<const float> row,
                                              bool* allowed) {
  *allowed = true;
  if (constraint_ == nullptr) return row;
  masked_.assign(row.begin(), row.end());
  *allowed = constraint_->ApplyMask(constraint_row, absl::MakeSpan(masked_));
  return masked_;
}

absl::Status RequestOutput::AfterConstrained(int constraint_row, int32_t token,
                                             std::optional<FinishReason>* reason) {
  if (constraint_ == nullptr) return absl::OkStatus();
  if (!constraint_->Accept(constraint_row, token)) {
    return absl::InternalError(
        absl::StrCat("constraint: token ", token, " was sampled outside the mask"));
  }
  if (!*reason && constraint_->Finished(constraint_row)) *reason = FinishReason::kStop;
  return absl::OkStatus();
}

absl::StatusOr<OutputStep> RequestOutput::OnLogits(const at::Tensor& logits) {
  if (!multi_row()) return StepOneRow(logits);
  const int64_t vocab = model_->vocab_size;
  at::Tensor holder;
  const absl::Span<const float> all = FloatRow(logits, &holder);
  const int64_t rows = static_cast<int64_t>(all.size()) / vocab;
  if (rows != rows_ || rows * vocab != static_cast<int64_t>(all.size())) {
    return absl::InternalError(
        absl::StrCat("the step returned ", all.size(), " logits for ", rows_, " rows of ", vocab));
  }
  return beams_ != nullptr ? StepBeams(all) : StepSamples(all);
}

absl::StatusOr<OutputStep> RequestOutput::StepOneRow(const at::Tensor& logits) {
  OutputStep step;
  int32_t token;
  at::Tensor holder;
  if (constraint_ != nullptr) {
    bool allowed;
    const absl::Span<const float> masked = Masked(0, FloatRow(logits, &holder), &allowed);
    if (!allowed) {
      return absl::InternalError("constraint: no token of the vocabulary continues the output");
    }
    token = sampler_->Sample(masked, tokens_);
  } else {
    token = sampler_->Sample(logits, tokens_);
  }
  tokens_.push_back(token);
  ++num_generated_;
  step.tokens_sampled = 1;
  std::optional<FinishReason> reason = EndAfter(token, num_generated_);
  if (absl::Status s = AfterConstrained(0, token, &reason); !s.ok()) return s;
  std::vector<int32_t> ids = {token};
  std::vector<model::PositionLogprobs> logprobs;
  if (request_.top_logprobs >= 0) {
    logprobs = LogprobsOf(
        holder.defined()
            ? absl::Span<const float>(holder.data_ptr<float>(), static_cast<size_t>(holder.numel()))
            : FloatRow(logits, &holder),
        token);
  }
  std::string text = TextOf(detokenizer_.get(), stop_, token, &reason);
  // Jump-forward: what the constraint alone decides next is appended without sampling (no
  // log-probabilities: the model did not choose them).
  if (constraint_ != nullptr && !reason && model_->max_forced_tokens > 0 &&
      request_.top_logprobs < 0) {
    const int64_t room = request_.max_new_tokens - num_generated_;
    const std::vector<int32_t> forced = constraint_->ForcedTokens(
        0, static_cast<int>(std::min<int64_t>(room, model_->max_forced_tokens)));
    for (int32_t f : forced) {
      tokens_.push_back(f);
      ++num_generated_;
      ++forced_tokens_;
      ++step.forced_tokens;
      ids.push_back(f);
      reason = EndAfter(f, num_generated_);
      if (absl::Status s = AfterConstrained(0, f, &reason); !s.ok()) return s;
      text += TextOf(detokenizer_.get(), stop_, f, &reason);
      if (reason) break;
    }
  }
  SequenceOutput output;
  output.text = text;
  output.token_ids = ids;
  output.logprobs = logprobs;
  sink_->OnOutput(output);
  step.finished = reason;
  return step;
}

absl::StatusOr<OutputStep> RequestOutput::StepBeams(absl::Span<const float> all) {
  const int64_t vocab = model_->vocab_size;
  const bool first = num_generated_ == 0;
  if (constraint_ != nullptr) {
    // Every beam under its own state; a beam the constraint cannot continue gets no
    // candidate (all -inf), so finite-scored beams always win over it.
    masked_.assign(all.begin(), all.end());
    for (int64_t r = 0; r < rows_; ++r) {
      constraint_->ApplyMask(static_cast<int>(r),
                             absl::MakeSpan(masked_).subspan(r * vocab, vocab));
    }
    all = masked_;
  }
  model::BeamSearch::Step beam_step;
  if (absl::Status s = beams_->Advance(all, vocab, &beam_step); !s.ok()) {
    return absl::InternalError(absl::StrCat("beam search: ", s.message()));
  }
  OutputStep step;
  ++num_generated_;
  step.tokens_sampled = rows_;
  if (beam_step.done) {
    step.finished = EndBeams(FinishReason::kLength);
    return step;
  }
  // The first step's beams all continue the prompt: its row, repeated.
  if (first) {
    step.row_changes.push_back({.repeats = request_.num_beams});
  } else {
    step.row_changes.push_back({.parents = beam_step.parents});
  }
  rows_ = request_.num_beams;
  if (constraint_ != nullptr) {
    if (first) {
      constraint_->Reorder(std::vector<int64_t>(static_cast<size_t>(rows_), 0));
    } else {
      constraint_->Reorder(beam_step.parents);
    }
    // A beam taking a token outside its mask (only when fewer tokens than beams were
    // allowed: its score is -inf) is dead and stays out of the results.
    for (int64_t r = 0; r < rows_; ++r) {
      (void)constraint_->Accept(static_cast<int>(r), beam_step.tokens[r]);
    }
  }
  row_tokens_ = std::move(beam_step.tokens);
  return step;
}

absl::StatusOr<OutputStep> RequestOutput::StepSamples(absl::Span<const float> all) {
  const int64_t vocab = model_->vocab_size;
  const bool first = num_generated_ == 0;
  // The first step draws every sample from the prompt's one row.
  const int64_t drawn = first ? static_cast<int64_t>(samples_.size()) : rows_;
  if (first) {
    row_sample_.resize(samples_.size());
    for (size_t i = 0; i < samples_.size(); ++i) row_sample_[i] = static_cast<int>(i);
  }
  OutputStep step;
  ++num_generated_;
  step.tokens_sampled = drawn;
  std::vector<int64_t> keep;  // rows (after the first step's expansion) still running
  for (int64_t r = 0; r < drawn; ++r) {
    const absl::Span<const float> row = first ? all : all.subspan(r * vocab, vocab);
    const int index = row_sample_[r];
    Sample& sample = samples_[index];
    bool allowed;
    const absl::Span<const float> masked = Masked(index, row, &allowed);
    if (!allowed) {
      return absl::InternalError("constraint: no token of the vocabulary continues the output");
    }
    const int32_t token = sample.sampler->Sample(masked, sample.context);
    sample.context.push_back(token);
    ++sample.num_generated;
    ++completion_tokens_;
    std::optional<FinishReason> reason = EndAfter(token, sample.num_generated);
    if (absl::Status s = AfterConstrained(index, token, &reason); !s.ok()) return s;
    const std::string text = TextOf(sample.detokenizer.get(), sample.stop, token, &reason);
    const std::vector<model::PositionLogprobs> logprobs = LogprobsOf(row, token);
    sample.finish = reason;
    const int32_t ids[1] = {token};
    SequenceOutput output;
    output.index = index;
    output.text = text;
    output.token_ids = ids;
    output.logprobs = logprobs;
    output.finish = reason;
    sink_->OnOutput(output);
    if (!reason) keep.push_back(r);
  }
  if (keep.empty()) {
    step.finished = samples_.front().finish;
    return step;
  }
  if (first) {
    step.row_changes.push_back({.repeats = drawn});
    rows_ = drawn;
  }
  if (static_cast<int64_t>(keep.size()) < rows_) {
    // Finished samples leave the batch.
    std::vector<int> row_sample;
    for (int64_t r : keep) row_sample.push_back(row_sample_[r]);
    row_sample_ = std::move(row_sample);
    rows_ = static_cast<int64_t>(keep.size());
    step.row_changes.push_back({.parents = std::move(keep)});
    step.new_rows = rows_;
  }
  row_tokens_.clear();
  for (int index : row_sample_) row_tokens_.push_back(samples_[index].context.back());
  return step;
}

FinishReason RequestOutput::EndBeams(FinishReason cut) {
  // The best hypotheses, each sent whole with its score.
  std::vector<model::BeamHypothesis> best = beams_->Finalize();
  std::optional<FinishReason> first;
  if (constraint_ != nullptr) {
    // Beams that left their constraint (score -inf: fewer tokens were allowed than beams
    // ran) are not values; fewer sequences come back instead.
    std::erase_if(best, [](const model::BeamHypothesis& h) { return !std::isfinite(h.score); });
  }
  for (size_t j = 0; j < best.size(); ++j) {
    const model::BeamHypothesis& h = best[j];
    FinishReason reason = cut;
    if (h.ended) {
      const bool is_eos = !request_.ignore_eos && !h.tokens.empty() &&
                          Contains(model_->eos_token_ids, h.tokens.back());
      reason = is_eos ? FinishReason::kEos : FinishReason::kStop;
    }
    std::string text;
    if (model_->tokenizer != nullptr) {
      tokenizer::IncrementalDetokenizer detokenizer(model_->tokenizer,
                                                    /*skip_special_tokens=*/true);
      for (int32_t token : h.tokens) text += detokenizer.Add(token);
      text += detokenizer.Finish();
    }
    completion_tokens_ += static_cast<int64_t>(h.tokens.size());
    SequenceOutput output;
    output.index = static_cast<int>(j);
    output.text = text;
    output.token_ids = h.tokens;
    output.logprobs = h.logprobs;
    output.finish = reason;
    output.score = h.score;
    sink_->OnOutput(output);
    if (!first) first = reason;
  }
  return first.value_or(cut);
}

FinishReason RequestOutput::Cut(FinishReason cut) {
  if (beams_ != nullptr) return EndBeams(cut);
  if (!samples_.empty()) {
    // Samples still running end here with what they have.
    for (size_t i = 0; i < samples_.size(); ++i) {
      Sample& sample = samples_[i];
      if (sample.finish) continue;
      std::string text;
      if (sample.detokenizer) text = sample.stop.Feed(sample.detokenizer->Finish());
      text += sample.stop.Flush();
      sample.finish = cut;
      SequenceOutput output;
      output.index = static_cast<int>(i);
      output.text = text;
      output.finish = cut;
      sink_->OnOutput(output);
    }
    return *samples_.front().finish;
  }
  std::string text;
  if (detokenizer_) text = stop_.Feed(detokenizer_->Finish());
  text += stop_.Flush();
  if (!text.empty()) {
    SequenceOutput output;
    output.text = text;
    sink_->OnOutput(output);
  }
  return cut;
}

}  // namespace kvserve::server
