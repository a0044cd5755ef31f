// Next-token selection: greedy or seeded sampling with Transformers' logits processors.
#pragma once

#include <ATen/ATen.h>

#include <array>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "model/sampling_params.h"

namespace kvserve::model {

// Picks next tokens for one request. Owns its generator, so one Sampler per request; not
// thread-safe (the engine thread calls it). Processing order is Transformers': repetition
// penalty, temperature, top_k, top_p, min_p, then one draw from the remaining softmax.
// Draws use xoshiro256** seeded through splitmix64 and no standard-library distribution, so
// a seed gives the same tokens on every platform and LibTorch version.
class Sampler {
 public:
  // `params` must pass Validate() (a broken invariant otherwise: KVSERVE_CHECK).
  explicit Sampler(const SamplingParams& params);

  // logits: [vocab] floating tensor on any device (copied to float32 CPU when it is not
  // already). context: prompt + generated ids, for the repetition penalty; ids outside
  // [0, vocab) are ignored. Returns a token id in [0, vocab); greedy picks the lowest id on
  // ties. An empty or non-1-D tensor is a broken invariant (KVSERVE_CHECK).
  int32_t Sample(const at::Tensor& logits, absl::Span<const int32_t> context);

  // Same as above on a contiguous row of float32 logits [vocab].
  int32_t Sample(absl::Span<const float> logits, absl::Span<const int32_t> context);

  const SamplingParams& params() const { return params_; }

 private:
  // Uniform double in [0, 1) from the top 53 bits of the next xoshiro256** output.
  double NextUniform();
  // exp(scores_[id] - max_score_): the unnormalised probability of a candidate.
  float Weight(int32_t id) const;
  // Narrows candidates_ to the top_k highest scores_ (ties kept), ids ascending.
  void ApplyTopK(int32_t vocab);
  // Narrows candidates_ to the nucleus of mass top_p, ids ascending.
  void ApplyTopP();
  // Narrows candidates_ to those with probability >= min_p * max probability.
  void ApplyMinP();
  // Picks among candidates_ (ids ascending) by the softmax of their scores_.
  int32_t Draw();

  SamplingParams params_;
  std::array<uint64_t, 4> rng_state_;
  // Scratch reused between calls so a decode step allocates nothing once warm.
  std::vector<float> scores_;        // [vocab] processed logits
  std::vector<int32_t> candidates_;  // ids still allowed
  std::vector<float> selection_;     // scratch for the top-k threshold
  struct Ranked {
    float score;
    int32_t id;
    double weight;  // exp(score - max score)
  };
  std::vector<Ranked> ranked_;  // [candidates] scratch for the top-p selection
  std::vector<float> weights_;  // [candidates] unnormalised probabilities
  float max_score_ = 0;         // best score among candidates_
};

}  // namespace kvserve::model
