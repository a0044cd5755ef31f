// SamplingParams: how one request picks its tokens (no LibTorch, for headers that only carry
// them).
#pragma once

#include <cstdint>

#include "absl/status/status.h"

namespace kvserve::model {

// How one request picks its tokens. Defaults are Transformers' GenerationConfig defaults.
struct SamplingParams {
  // false: greedy (argmax after the repetition penalty); temperature/top_k/top_p/min_p and
  // seed are then ignored.
  bool do_sample = false;
  // Divides the logits before filtering; must be > 0 when do_sample.
  double temperature = 1.0;
  // Keep the top_k highest logits (ties with the k-th are all kept); 0 turns it off.
  int32_t top_k = 50;
  // Keep the smallest most-likely set whose probability reaches top_p; in (0, 1], 1 = off.
  double top_p = 1.0;
  // Drop tokens whose probability is below min_p times the top probability; in [0, 1].
  double min_p = 0.0;
  // Divides positive (multiplies negative) logits of tokens already in the context; > 0,
  // 1 = off.
  double repetition_penalty = 1.0;
  // Seeds the request's own generator: the same seed gives the same tokens everywhere.
  uint64_t seed = 0;

  // Returns InvalidArgument naming the first offending field, OK otherwise.
  absl::Status Validate() const;
};

}  // namespace kvserve::model
