// Greedy and seeded sampling over one row of logits, in Transformers' processor order.
#include "model/sampler.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/check.h"

namespace kvserve::model {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t RotateLeft(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

// Lowest id among the highest scores; -inf everywhere gives 0.
int32_t ArgMax(absl::Span<const float> scores) {
  int32_t best = 0;
  float best_score = scores[0];
  for (size_t i = 1; i < scores.size(); ++i) {
    if (scores[i] > best_score) {
      best_score = scores[i];
      best = static_cast<int32_t>(i);
    }
  }
  return best;
}

}  // namespace

absl::Status SamplingParams::Validate() const {
  if (do_sample && !(temperature > 0.0 && std::isfinite(temperature))) {
    return absl::InvalidArgumentError(
        absl::StrCat("temperature must be > 0 when do_sample is set, got ", temperature));
  }
  if (top_k < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_k must be >= 0 (0 turns it off), got ", top_k));
  }
  if (!(top_p > 0.0 && top_p <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat("top_p must be in (0, 1], got ", top_p));
  }
  if (!(min_p >= 0.0 && min_p <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat("min_p must be in [0, 1], got ", min_p));
  }
  if (!(repetition_penalty > 0.0 && std::isfinite(repetition_penalty))) {
    return absl::InvalidArgumentError(
        absl::StrCat("repetition_penalty must be > 0, got ", repetition_penalty));
  }
  return absl::OkStatus();
}

Sampler::Sampler(const SamplingParams& params) : params_(params) {
  const absl::Status status = params.Validate();
  KVSERVE_CHECK(status.ok()) << "invalid SamplingParams: " << status.message();
  uint64_t seed_state = params.seed;
  for (uint64_t& word : rng_state_) word = SplitMix64(seed_state);
}

double Sampler::NextUniform() {
  uint64_t* s = rng_state_.data();
  const uint64_t result = RotateLeft(s[1] * 5, 7) * 9;
  const uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = RotateLeft(s[3], 45);
  return static_cast<double>(result >> 11) * 0x1.0p-53;
}

int32_t Sampler::Sample(const at::Tensor& logits, absl::Span<const int32_t> context) {
  KVSERVE_CHECK(logits.dim() == 1 && logits.numel() > 0)
      << "Sampler::Sample wants a non-empty [vocab] tensor, got shape " << logits.sizes();
  at::Tensor row = logits;
  if (!row.device().is_cpu() || row.scalar_type() != at::kFloat) {
    row = row.to(at::kCPU, at::kFloat);
  }
  row = row.contiguous();
  return Sample(absl::MakeConstSpan(row.data_ptr<float>(), static_cast<size_t>(row.numel())),
                context);
}

int32_t Sampler::Sample(absl::Span<const float> logits, absl::Span<const int32_t> context) {
  KVSERVE_CHECK(!logits.empty()) << "Sampler::Sample got an empty logits row";
  const auto vocab = static_cast<int32_t>(logits.size());
  // NaN would break the orderings below; it can never be the best choice anyway.
  scores_.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    scores_[i] = std::isnan(logits[i]) ? kNegInf : logits[i];
  }

  // Computed from the original logits, so an id repeated in the context is penalised once.
  if (params_.repetition_penalty != 1.0) {
    const auto penalty = static_cast<float>(params_.repetition_penalty);
    for (const int32_t id : context) {
      if (id < 0 || id >= vocab) continue;
      const float x = scores_[id] == kNegInf ? kNegInf : logits[id];
      scores_[id] = x < 0 ? x * penalty : x / penalty;
    }
  }
  if (!params_.do_sample) return ArgMax(scores_);

  // Divided in float32 as Transformers does, so the filters see the same values.
  if (params_.temperature != 1.0) {
    const auto temperature = static_cast<float>(params_.temperature);
    for (float& x : scores_) x /= temperature;
  }
  if (params_.top_k > 0 && params_.top_k < vocab) {
    ApplyTopK(vocab);
  } else {
    candidates_.resize(logits.size());
    for (int32_t i = 0; i < vocab; ++i) candidates_[i] = i;
  }
  // Every filter keeps the best candidate, so this maximum holds until the draw.
  max_score_ = kNegInf;
  for (const int32_t id : candidates_) max_score_ = std::max(max_score_, scores_[id]);
  if (max_score_ == kNegInf) return candidates_.front();
  if (params_.top_p < 1.0) ApplyTopP();
  if (params_.min_p > 0.0) ApplyMinP();
  return Draw();
}

void Sampler::ApplyTopK(int32_t vocab) {
  // Only the k-th largest value matters, so a selection on plain floats (not indices) suffices
  // and the kept set does not depend on the library's selection algorithm. For the usual small
  // k a min-heap of the best k seen is one comparison per token; large k uses nth_element.
  const int32_t k = params_.top_k;
  float threshold;
  if (k <= 1024) {
    selection_.assign(scores_.begin(), scores_.begin() + k);
    std::make_heap(selection_.begin(), selection_.end(), std::greater<float>());
    for (int32_t i = k; i < vocab; ++i) {
      if (scores_[i] > selection_.front()) {
        std::pop_heap(selection_.begin(), selection_.end(), std::greater<float>());
        selection_.back() = scores_[i];
        std::push_heap(selection_.begin(), selection_.end(), std::greater<float>());
      }
    }
    threshold = selection_.front();
  } else {
    selection_.assign(scores_.begin(), scores_.end());
    const auto kth = selection_.begin() + (k - 1);
    std::nth_element(selection_.begin(), kth, selection_.end(), std::greater<float>());
    threshold = *kth;
  }
  candidates_.clear();
  for (int32_t i = 0; i < vocab; ++i) {
    if (scores_[i] >= threshold) candidates_.push_back(i);
  }
}

float Sampler::Weight(int32_t id) const { return std::exp(scores_[id] - max_score_); }

void Sampler::ApplyTopP() {
  // A token stays while the mass ranked strictly above it is below top_p (Transformers removes
  // tokens whose ascending cumulative probability is <= 1 - top_p). The ranking is by
  // descending score, ties by ascending id: a strict total order, so the nucleus is the same
  // with every standard library.
  //
  // Without sorting the vocabulary: bucket the candidates by how far below the best they are
  // (bucket index never decreases as the score falls), find the bucket where the cumulative
  // mass reaches top_p, keep every bucket above it and rank only that bucket's tokens.
  constexpr int kBuckets = 512;
  constexpr float kBucketsPerUnit = 16.0f;  // buckets span 32 units of logit below the best
  const auto bucket_of = [this](int32_t id) {
    const float below = (max_score_ - scores_[id]) * kBucketsPerUnit;
    return below < kBuckets - 1 ? static_cast<int>(below) : kBuckets - 1;
  };
  std::array<double, kBuckets> bucket_mass{};
  double total = 0;
  for (const int32_t id : candidates_) {
    const float weight = Weight(id);
    bucket_mass[bucket_of(id)] += weight;
    total += weight;
  }
  const double target = params_.top_p * total;
  int boundary = kBuckets - 1;
  double mass_above = 0;  // of the buckets before `boundary`
  for (int b = 0; b < kBuckets; ++b) {
    if (mass_above + bucket_mass[b] >= target) {
      boundary = b;
      break;
    }
    mass_above += bucket_mass[b];
  }

  size_t kept = 0;
  ranked_.clear();
  for (const int32_t id : candidates_) {
    const int b = bucket_of(id);
    if (b < boundary) {
      candidates_[kept++] = id;
    } else if (b == boundary) {
      ranked_.push_back({scores_[id], id, Weight(id)});
    }
  }
  candidates_.resize(kept);

  // Within the boundary bucket a weighted quickselect finds the cut in expected O(n) even
  // when the bucket holds most of the vocabulary: [lo, hi) always holds the cut.
  const auto descending = [](const Ranked& a, const Ranked& b) {
    return a.score > b.score || (a.score == b.score && a.id < b.id);
  };
  size_t lo = 0;
  size_t hi = ranked_.size();
  constexpr size_t kSortBelow = 64;
  while (hi - lo > kSortBelow) {
    const size_t mid = lo + (hi - lo) / 2;
    std::nth_element(ranked_.begin() + lo, ranked_.begin() + mid, ranked_.begin() + hi, descending);
    double upper = 0;
    for (size_t i = lo; i < mid; ++i) upper += ranked_[i].weight;
    if (mass_above + upper >= target) {
      hi = mid;
    } else {
      mass_above += upper;
      lo = mid;
    }
  }
  std::sort(ranked_.begin() + lo, ranked_.begin() + hi, descending);
  size_t cut = lo;
  while (cut < hi && mass_above < target) mass_above += ranked_[cut++].weight;
  // The best token always stays (top_p > 0), even if rounding says otherwise.
  if (candidates_.empty()) cut = std::max<size_t>(cut, 1);
  // Buckets above the cut were gathered in id order; only the boundary's few need sorting.
  const size_t above = candidates_.size();
  for (size_t i = 0; i < cut; ++i) candidates_.push_back(ranked_[i].id);
  std::sort(candidates_.begin() + above, candidates_.end());
  std::inplace_merge(candidates_.begin(), candidates_.begin() + above, candidates_.end());
}

void Sampler::ApplyMinP() {
  // exp(score - max) < min_p, compared in log space to spare an exp per token.
  const float log_min_p = static_cast<float>(std::log(params_.min_p));
  std::erase_if(candidates_, [&](int32_t id) { return scores_[id] - max_score_ < log_min_p; });
}

int32_t Sampler::Draw() {
  weights_.resize(candidates_.size());
  double total = 0;
  for (size_t i = 0; i < candidates_.size(); ++i) {
    weights_[i] = Weight(candidates_[i]);
    total += weights_[i];
  }
  const double u = NextUniform() * total;
  double cumulative = 0;
  int32_t last_possible = candidates_.front();
  for (size_t i = 0; i < candidates_.size(); ++i) {
    if (weights_[i] <= 0) continue;
    cumulative += weights_[i];
    last_possible = candidates_[i];
    if (u < cumulative) return candidates_[i];
  }
  // Rounding left u at the very top of the range.
  return last_possible;
}

}  // namespace kvserve::model
