// The single-sequence generation loop (see generator.h).
#include "model/generator.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"

namespace kvserve::model {
namespace {

double MillisSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace

absl::StatusOr<GenerateResult> Generate(Model& model, absl::Span<const int32_t> prompt,
                                        cache::KvCache* cache, const GenerateOptions& options) {
  if (prompt.empty()) return absl::InvalidArgumentError("prompt: must not be empty");
  if (options.max_new_tokens < 0) {
    return absl::InvalidArgumentError("max_new_tokens: must be >= 0");
  }
  if (absl::Status s = options.sampling.Validate(); !s.ok()) return s;
  if (cache != nullptr && cache->SeqLength() != 0) {
    return absl::InvalidArgumentError("cache: must be empty at the start of Generate");
  }

  GenerateResult result;
  result.prompt_tokens = static_cast<int64_t>(prompt.size());
  Sampler sampler(options.sampling);
  const std::vector<int32_t>& eos = model.info().eos_token_ids;
  // An encoder-decoder model reads the prompt in its encoder and decodes from its start tokens.
  const bool encoder_decoder = model.info().encoder_decoder();
  std::vector<int32_t> sequence = encoder_decoder
                                      ? model.info().decoder_start_ids
                                      : std::vector<int32_t>(prompt.begin(), prompt.end());

  auto run = [&](absl::Span<const int32_t> tokens) -> absl::StatusOr<at::Tensor> {
    Batch batch;
    batch.sequences.push_back({tokens, cache, false});
    if (encoder_decoder) batch.sequences.back().encoder_token_ids = prompt;
    absl::StatusOr<ForwardOutput> out = model.Forward(batch);
    if (!out.ok()) return out.status();
    return out->logits[0];
  };

  auto start = std::chrono::steady_clock::now();
  absl::StatusOr<at::Tensor> logits = run(sequence);
  if (!logits.ok()) return logits.status();
  result.prefill_ms = MillisSince(start);
  result.prompt_logits = *logits;
  result.finish_reason = "length";

  start = std::chrono::steady_clock::now();
  for (int64_t step = 0; step < options.max_new_tokens; ++step) {
    if (step > 0) {
      // With a cache only the newest token runs; without one, the whole sequence again.
      logits = cache != nullptr ? run(absl::MakeConstSpan(&sequence.back(), 1)) : run(sequence);
      if (!logits.ok()) return logits.status();
      ++result.decode_steps;
    }
    const int32_t token = sampler.Sample(*logits, sequence);
    if (options.record_logits) result.logits.push_back(*logits);
    result.tokens.push_back(token);
    sequence.push_back(token);
    if (!options.ignore_eos && std::find(eos.begin(), eos.end(), token) != eos.end()) {
      result.finish_reason = "eos";
      break;
    }
  }
  result.decode_ms = MillisSince(start);
  return result;
}

}  // namespace kvserve::model
