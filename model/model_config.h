// The validated form of a Hugging Face config.json for the supported decoder architectures.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "cache/layer_type.h"

namespace kvserve::model {

// RoPE frequency scaling ("rope_scaling" or Transformers v5 "rope_parameters").
struct RopeScaling {
  enum class Type { kNone, kLinear, kDynamic, kLlama3, kYarn };
  Type type = Type::kNone;
  double factor = 1.0;                                   // linear, dynamic, llama3, yarn
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  // llama3, yarn, dynamic; 0 means use max_position_embeddings.
  int64_t original_max_position_embeddings = 0;
  double beta_fast = 32.0, beta_slow = 1.0;  // yarn
  std::optional<double> attention_factor;    // yarn (mscale), as written

  // The yarn attention factor to apply: attention_factor if written, else
  // 0.1 * ln(factor) + 1 when factor > 1, else 1.
  double YarnAttentionFactor() const;
  bool operator==(const RopeScaling&) const = default;
};

// The Hugging Face spelling of a rope type ("default", "linear", "dynamic", "llama3", "yarn").
std::string_view RopeTypeName(RopeScaling::Type type);

// Every field is resolved: defaults applied as Transformers applies them for the model_type.
struct ModelConfig {
  std::string model_type;  // llama | mistral | qwen2 | qwen3 | phi3 | gemma2 | gemma3_text
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;      // default num_attention_heads
  int64_t head_dim = 0;                 // default hidden_size / num_attention_heads (qwen3: 128)
  int64_t max_position_embeddings = 0;  // default per model_type, as Transformers
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  double partial_rotary_factor = 1.0;  // fraction of head_dim that is rotated, in (0, 1]
  bool attention_bias = false;         // q/k/v biases (qwen2 default true)
  bool qk_norm = false;                // qwen3: per-head RMSNorm on q and k
  // phi3 checkpoints store qkv_proj / gate_up_proj instead of q/k/v and gate/up.
  bool fused_qkv = false, fused_gate_up = false;
  bool tie_word_embeddings = false;
  // Effective window: for qwen2/qwen3 only when use_sliding_window is true.
  std::optional<int64_t> sliding_window;
  std::optional<int64_t> attention_chunk_size;
  std::vector<kvserve::cache::LayerType> layer_types;  // resolved, one per layer
  std::optional<int32_t> bos_token_id;
  std::vector<int32_t> eos_token_ids;  // eos_token_id written as an int or a list
  std::optional<int32_t> pad_token_id;
  std::string torch_dtype;  // as written ("torch_dtype", or v5 "dtype"); may be empty

  // Gemma 2 and 3 (follows from model_type): RMSNorm scales by (1 + weight), embeddings are
  // multiplied by sqrt(hidden_size), the attention output and the MLP output are normed before
  // their residual add (post_attention_layernorm, pre_ and post_feedforward_layernorm), and the
  // MLP is GeGLU with the tanh approximation of GELU (hidden_activation gelu_pytorch_tanh).
  bool gemma = false;
  // The attention scale is query_pre_attn_scalar^-1/2 (gemma default 256); 0 means head_dim.
  double query_pre_attn_scalar = 0;
  // Soft-capping: x -> cap * tanh(x / cap) on the attention scores before the mask, and on
  // the final logits (gemma2 defaults 50 and 30; absent for gemma3_text; JSON null disables).
  std::optional<double> attn_logit_softcapping;
  std::optional<double> final_logit_softcapping;
  // gemma3_text: the RoPE base of sliding layers (default 10000), which take no rope_scaling;
  // full layers use rope_theta (default 1e6) and rope_scaling.
  std::optional<double> rope_local_base_freq;

  // Parses config.json. Unknown model_type: InvalidArgument naming it and listing the
  // supported ones. A missing required field (model_type, vocab_size, hidden_size,
  // intermediate_size, num_hidden_layers, num_attention_heads), a field of the wrong JSON
  // type, an unsupported rope type, or inconsistent sizes (a size outside its bounds, heads
  // not dividing hidden_size, kv heads not dividing heads, layer_types of the wrong length, a
  // sliding or chunked layer without its window, a bos_token_id not below vocab_size) are
  // InvalidArgument naming the field. Bounds: vocab_size [1, 2^22], hidden_size [1, 2^16],
  // intermediate_size [1, 2^18], num_hidden_layers, num_attention_heads, num_key_value_heads
  // and head_dim [1, 1024], max_position_embeddings [1, 2^20], sliding_window and
  // attention_chunk_size [2, 2^20], original_max_position_embeddings [0, 2^20]; for gemma,
  // hidden_activation other than gelu_pytorch_tanh, and a query_pre_attn_scalar, softcap or
  // rope_local_base_freq that is not positive. Never throws.
  static absl::StatusOr<ModelConfig> Parse(std::string_view json_text);
  // A config.json that Parse reads back to an equal config (layer_types written out).
  // qk_norm and the fused flags follow from model_type and are not written.
  std::string ToJson() const;
  // Per layer: its type and window (sliding_window for sliding layers, attention_chunk_size
  // for chunked ones; when both kinds exist every sliding layer gets the chunk size, as
  // Transformers does; 0 for full layers).
  std::vector<kvserve::cache::LayerSpec> LayerSpecs() const;
  // The model types Parse accepts, sorted.
  static const std::vector<std::string>& SupportedModelTypes();

  bool operator==(const ModelConfig&) const = default;
};

}  // namespace kvserve::model
