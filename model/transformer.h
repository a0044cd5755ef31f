// Transformer: the Llama-family decoder (llama, mistral, qwen2, qwen3, phi3) and Gemma 2 / 3
// (gemma2, gemma3_text) over a ragged batch, loaded from a Hugging Face checkpoint.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "base/model_source.h"
#include "model/model.h"
#include "model/model_config.h"
#include "model/multi_row_gemv.h"
#include "model/rotary_embedding.h"

namespace kvserve::model {

struct TransformerOptions {
  // Runtime dtype of weights and activations (checkpoints in F32/F16/BF16 are converted).
  at::ScalarType dtype = at::kFloat;
  // Storage dtype of the projection and embedding weights, which on the CPU with float32
  // activations may be narrower than `dtype`: each weight element is widened to float32 in
  // registers, so a 16-bit weight halves the memory a decode step streams. nullopt (auto)
  // keeps each such tensor's checkpoint dtype when it is bfloat16 or float16, since widening
  // those is exact, and uses `dtype` otherwise. A value converts every such weight to it
  // (float32, bfloat16 or float16); anything but `dtype` needs float32 on the CPU.
  std::optional<at::ScalarType> weight_dtype;
  // How float32 activations meet bfloat16 weights (Bf16Compute): kNative ("auto") rounds the
  // activations to bfloat16 where the CPU has AVX512-BF16, as Transformers and llama.cpp do;
  // kExact widens the weights instead.
  Bf16Compute bf16_compute = Bf16Compute::kNative;
  // Device the weights and caches live on.
  c10::Device device = c10::Device(c10::kCPU);
};

// The --weight-dtype flag's help text, shared by kvserve and kvserve-generate.
inline constexpr char kWeightDtypeFlagHelp[] =
    "auto | float32 | bfloat16 | float16: storage of the projection weights on the CPU with "
    "float32 activations (auto: the checkpoint's when it is 16-bit)";

// Parses a --weight-dtype value: "auto" (nullopt), "float32", "bfloat16" or "float16"
// (also fp32, bf16, fp16). InvalidArgument naming the flag and the accepted values.
absl::StatusOr<std::optional<at::ScalarType>> ParseWeightDtype(std::string_view name);

// The --bf16-compute flag's help text, shared by kvserve and kvserve-generate.
inline constexpr char kBf16ComputeFlagHelp[] =
    "auto | exact: how bfloat16 projection weights multiply float32 activations on the CPU "
    "(auto: the activations rounded to bfloat16 and multiplied by AVX512-BF16 instructions "
    "where the CPU has them, products summed in float32, as Transformers and llama.cpp do; "
    "exact: the weights widened to float32, as a float32 copy of the checkpoint computes)";

// Parses a --bf16-compute value: "auto" (kNative) or "exact". InvalidArgument naming the flag
// and the accepted values.
absl::StatusOr<Bf16Compute> ParseBf16Compute(std::string_view name);

// Weights are stored fused (q/k/v in one matrix, gate/up in one) so that a step runs two
// GEMMs (GEMVs for a single token) per block instead of five. Immutable after Load, but
// Forward is not reentrant: only the engine thread calls it.
class Transformer final : public Model {
 public:
  // Loads config.json and the safetensors weights of `source`. Errors name the file and the
  // problem: an unknown architecture, a missing or unexpected tensor, a shape mismatch.
  static absl::StatusOr<std::unique_ptr<Transformer>> Load(const base::ModelSource& source,
                                                           const TransformerOptions& options);

  absl::StatusOr<ForwardOutput> Forward(const Batch& batch) override;
  const ModelInfo& info() const override { return info_; }
  const ModelConfig& config() const { return config_; }

 private:
  struct Layer {
    at::Tensor input_norm;      // [hidden] (gemma: 1 + the checkpoint's weight, as every norm)
    at::Tensor qkv_weight;      // [(heads + 2 * kv_heads) * head_dim, hidden]
    at::Tensor qkv_bias;        // [(heads + 2 * kv_heads) * head_dim] or undefined
    at::Tensor q_norm;          // [head_dim] or undefined (qwen3)
    at::Tensor k_norm;          // [head_dim] or undefined (qwen3)
    at::Tensor o_weight;        // [hidden, heads * head_dim]
    at::Tensor o_bias;          // [hidden] or undefined (llama/mistral/qwen3 with attention_bias)
    at::Tensor post_attn_norm;  // [hidden] gemma: on the attention output; else undefined
    at::Tensor post_norm;       // [hidden] before the MLP (gemma: pre_feedforward_layernorm)
    at::Tensor post_ff_norm;    // [hidden] gemma: on the MLP output; else undefined
    at::Tensor gate_up_weight;  // [2 * intermediate, hidden]
    at::Tensor down_weight;     // [hidden, intermediate]
  };

  Transformer(ModelConfig config, ModelInfo info, RotaryEmbedding rope,
              std::optional<RotaryEmbedding> local_rope);
  absl::Status LoadWeights(const base::ModelSource& source, const TransformerOptions& options);

  ModelConfig config_;
  ModelInfo info_;
  RotaryEmbedding rope_;
  // gemma3_text's RoPE of sliding layers (rope_local_base_freq, no scaling); else nullopt.
  std::optional<RotaryEmbedding> local_rope_;
  std::vector<Layer> layers_;
  at::Tensor embed_;       // [vocab, hidden]
  at::Tensor final_norm_;  // [hidden]
  at::Tensor lm_head_;     // [vocab, hidden] (the embedding when tied)
  // Float32 copy of a 16-bit weight for a prefill's GEMM, reused across projections.
  at::Tensor widen_scratch_;
  // options.bf16_compute as it resolved on this CPU (ResolveBf16Compute).
  Bf16Compute bf16_compute_ = Bf16Compute::kExact;
};

}  // namespace kvserve::model
