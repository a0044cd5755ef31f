// RoPE frequency schedules and their application (see rotary_embedding.h).
#include "model/rotary_embedding.h"

#include <cmath>
#include <numbers>

#include "absl/strings/str_cat.h"

namespace kvserve::model {
namespace {

at::Tensor DefaultInvFreq(double base, int64_t dim) {
  // 1 / base^(2i/dim), i = 0 .. dim/2-1, in float64 then float32 as Transformers does.
  at::Tensor exponents = at::arange(0, dim, 2, at::kDouble) / static_cast<double>(dim);
  return (1.0 / at::pow(base, exponents)).to(at::kFloat);
}

at::Tensor Llama3InvFreq(const at::Tensor& inv_freq, const RopeScaling& s, int64_t max_pos) {
  const double old_len = s.original_max_position_embeddings > 0
                             ? static_cast<double>(s.original_max_position_embeddings)
                             : static_cast<double>(max_pos);
  const double low_wavelen = old_len / s.low_freq_factor;
  const double high_wavelen = old_len / s.high_freq_factor;
  const at::Tensor wavelen = 2.0 * std::numbers::pi / inv_freq;
  at::Tensor scaled = at::where(wavelen > low_wavelen, inv_freq / s.factor, inv_freq);
  const at::Tensor smooth =
      (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  const at::Tensor smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled;
  const at::Tensor medium = (wavelen >= high_wavelen).logical_and(wavelen <= low_wavelen);
  return at::where(medium, smoothed, scaled);
}

struct YarnResult {
  at::Tensor inv_freq;
  double attention_scaling;
};

YarnResult YarnInvFreq(double base, int64_t dim, const RopeScaling& s, int64_t max_pos) {
  const double orig = s.original_max_position_embeddings > 0
                          ? static_cast<double>(s.original_max_position_embeddings)
                          : static_cast<double>(max_pos);
  const double scaling = s.YarnAttentionFactor();
  auto correction_dim = [&](double num_rotations) {
    return (dim * std::log(orig / (num_rotations * 2.0 * std::numbers::pi))) /
           (2.0 * std::log(base));
  };
  double low = std::floor(correction_dim(s.beta_fast));
  double high = std::ceil(correction_dim(s.beta_slow));
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // avoid a division by zero in the ramp
  const at::Tensor pos_freqs =
      at::pow(base, at::arange(0, dim, 2, at::kDouble) / static_cast<double>(dim)).to(at::kFloat);
  const at::Tensor extrapolation = 1.0 / pos_freqs;
  const at::Tensor interpolation = 1.0 / (s.factor * pos_freqs);
  const at::Tensor ramp = ((at::arange(dim / 2, at::kFloat) - low) / (high - low)).clamp(0, 1);
  const at::Tensor extrapolation_weight = 1 - ramp;
  return {interpolation * (1 - extrapolation_weight) + extrapolation * extrapolation_weight,
          scaling};
}

}  // namespace

absl::StatusOr<RotaryEmbedding> RotaryEmbedding::Create(const ModelConfig& config,
                                                        at::ScalarType dtype,
                                                        const c10::Device& device) {
  RotaryEmbedding rope;
  rope.rotary_dim_ = static_cast<int64_t>(config.head_dim * config.partial_rotary_factor);
  if (rope.rotary_dim_ <= 0 || rope.rotary_dim_ % 2 != 0 || rope.rotary_dim_ > config.head_dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "partial_rotary_factor ", config.partial_rotary_factor, " gives a rotary dimension of ",
        rope.rotary_dim_, "; it must be even and in (0, head_dim]"));
  }
  rope.base_ = config.rope_theta;
  rope.dtype_ = dtype;
  const RopeScaling& s = config.rope_scaling;
  at::Tensor inv_freq = DefaultInvFreq(rope.base_, rope.rotary_dim_);
  switch (s.type) {
    case RopeScaling::Type::kNone:
      break;
    case RopeScaling::Type::kLinear:
      inv_freq = inv_freq / s.factor;
      break;
    case RopeScaling::Type::kDynamic:
      rope.dynamic_ = true;
      rope.dynamic_factor_ = s.factor;
      rope.original_max_positions_ = s.original_max_position_embeddings > 0
                                         ? s.original_max_position_embeddings
                                         : config.max_position_embeddings;
      break;
    case RopeScaling::Type::kLlama3:
      inv_freq = Llama3InvFreq(inv_freq, s, config.max_position_embeddings);
      break;
    case RopeScaling::Type::kYarn: {
      YarnResult yarn =
          YarnInvFreq(rope.base_, rope.rotary_dim_, s, config.max_position_embeddings);
      inv_freq = yarn.inv_freq;
      rope.attention_scaling_ = yarn.attention_scaling;
      break;
    }
  }
  rope.inv_freq_ = inv_freq.to(device);
  const int64_t table_len = std::max<int64_t>(config.max_position_embeddings, 1);
  const at::Tensor positions =
      at::arange(table_len, at::TensorOptions().dtype(at::kLong).device(device));
  std::tie(rope.cos_table_, rope.sin_table_) = rope.Compute(positions, rope.inv_freq_);
  return rope;
}

std::pair<at::Tensor, at::Tensor> RotaryEmbedding::Compute(const at::Tensor& positions,
                                                           const at::Tensor& inv_freq) const {
  const at::Tensor freqs = positions.to(at::kFloat).unsqueeze(1) * inv_freq.unsqueeze(0);
  const at::Tensor emb = at::cat({freqs, freqs}, -1);  // [tokens, rotary_dim]
  return {(emb.cos() * attention_scaling_).to(dtype_), (emb.sin() * attention_scaling_).to(dtype_)};
}

void RotaryEmbedding::Rotate(at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) const {
  // x[..., :rot] = x * cos + rotate_half(x) * sin, where rotate_half(a, b) = (-b, a).
  const int64_t half = rotary_dim_ / 2;
  at::Tensor rot = x.narrow(-1, 0, rotary_dim_);
  const at::Tensor rotated =
      at::cat({rot.narrow(-1, half, half).neg(), rot.narrow(-1, 0, half)}, -1);
  rot.copy_(rot * cos.unsqueeze(1) + rotated * sin.unsqueeze(1));
}

std::pair<at::Tensor, at::Tensor> RotaryEmbedding::CosSin(const at::Tensor& positions,
                                                          int64_t seq_len) const {
  if (dynamic_ && seq_len > original_max_positions_) {
    // Dynamic NTK: a larger base once the sequence outgrows the original context.
    const double base = base_ * std::pow(dynamic_factor_ * seq_len / original_max_positions_ -
                                             (dynamic_factor_ - 1),
                                         static_cast<double>(rotary_dim_) / (rotary_dim_ - 2));
    return Compute(positions, DefaultInvFreq(base, rotary_dim_).to(positions.device()));
  }
  if (seq_len > cos_table_.size(0)) return Compute(positions, inv_freq_);
  return {cos_table_.index_select(0, positions), sin_table_.index_select(0, positions)};
}

}  // namespace kvserve::model
