// Generate: the plain single-sequence loop (prefill, then one token per step) used by the
// kvserve-generate demo, benchmarks and equivalence tests. The server uses its engine instead.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cache/kv_cache.h"
#include "model/model.h"
#include "model/sampler.h"

namespace kvserve::model {

struct GenerateOptions {
  int64_t max_new_tokens = 16;  // >= 0
  SamplingParams sampling;      // greedy by default
  bool ignore_eos = false;      // keep going past an end-of-sequence token
  bool record_logits = false;   // keep the logits that chose each token
};

struct GenerateResult {
  std::vector<int32_t> tokens;     // generated tokens (EOS included when it stopped there)
  std::vector<at::Tensor> logits;  // per generated token, [vocab] float32, if recorded
  at::Tensor prompt_logits;        // [vocab] float32: the prompt's last position
  std::string finish_reason;       // "length" or "eos"
  int64_t prompt_tokens = 0;
  double prefill_ms = 0;
  double decode_ms = 0;      // time of every step after the prefill
  int64_t decode_steps = 0;  // forwards after the prefill
};

// Generates from `prompt` (non-empty; for an encoder-decoder model, its encoder input, the
// decoder starting from ModelInfo::decoder_start_ids). With `cache` (empty, built for `model`) the
// prompt is prefilled once and each step runs one token; with nullptr every step recomputes the
// whole sequence without a cache (the reference's use_cache=False). Errors from the model or the
// cache are returned as they are; `cache` then holds a partial step.
absl::StatusOr<GenerateResult> Generate(Model& model, absl::Span<const int32_t> prompt,
                                        cache::KvCache* cache, const GenerateOptions& options);

}  // namespace kvserve::model
