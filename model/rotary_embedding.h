// RotaryEmbedding: RoPE tables for every rope_scaling type kvserve supports (none, linear,
// dynamic NTK, llama3, yarn), applied in place to queries and keys.
#pragma once

#include <ATen/ATen.h>

#include "absl/status/statusor.h"
#include "model/model_config.h"

namespace kvserve::model {

class RotaryEmbedding {
 public:
  // Builds the tables for `config` (head_dim, partial_rotary_factor, rope_theta,
  // rope_scaling, max_position_embeddings) in `dtype` on `device`.
  static absl::StatusOr<RotaryEmbedding> Create(const ModelConfig& config, at::ScalarType dtype,
                                                const c10::Device& device);

  // cos/sin rows ([tokens, rotary_dim] each) for tokens at absolute `positions` (int64
  // [tokens] on the tables' device). `seq_len` is the length of the longest sequence in this
  // call; only dynamic NTK scaling reads it (its frequencies change once a sequence outgrows
  // the original context). Computed once per forward and shared by every layer.
  std::pair<at::Tensor, at::Tensor> CosSin(const at::Tensor& positions, int64_t seq_len) const;

  // Rotates x [tokens, heads, head_dim] in place with the rows from CosSin.
  void Rotate(at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) const;

  int64_t rotary_dim() const { return rotary_dim_; }

 private:
  RotaryEmbedding() = default;
  // cos/sin rows [tokens, rotary_dim] for `positions` with the given inverse frequencies.
  std::pair<at::Tensor, at::Tensor> Compute(const at::Tensor& positions,
                                            const at::Tensor& inv_freq) const;

  int64_t rotary_dim_ = 0;
  double attention_scaling_ = 1.0;  // yarn multiplies cos and sin by this
  bool dynamic_ = false;
  double base_ = 10000.0;
  double dynamic_factor_ = 1.0;
  int64_t original_max_positions_ = 0;
  at::ScalarType dtype_ = at::kFloat;
  at::Tensor inv_freq_;   // [rotary_dim / 2] float32
  at::Tensor cos_table_;  // [table_len, rotary_dim] in dtype_
  at::Tensor sin_table_;  // [table_len, rotary_dim] in dtype_
};

}  // namespace kvserve::model
