// The validated form of a Hugging Face config.json of model_type "mamba" (MambaForCausalLM).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace kvserve::model {

// Every field resolved with Transformers' MambaConfig defaults.
struct MambaConfig {
  int64_t vocab_size = 50280;
  int64_t hidden_size = 768;
  int64_t state_size = 16;  // N: SSM state per channel
  int64_t num_hidden_layers = 32;
  double layer_norm_epsilon = 1e-5;
  int64_t expand = 2;          // intermediate_size = expand * hidden_size
  int64_t conv_kernel = 4;     // K of the causal depthwise convolution
  int64_t time_step_rank = 0;  // "auto" resolves to ceil(hidden_size / 16)
  bool use_bias = false;       // in_proj / out_proj biases
  bool use_conv_bias = true;
  bool tie_word_embeddings = true;
  std::optional<int32_t> bos_token_id = 0;
  std::vector<int32_t> eos_token_ids = {0};
  std::string torch_dtype;  // as written; may be empty

  int64_t intermediate_size() const { return expand * hidden_size; }

  // Parses config.json (model_type must be "mamba"). A field of the wrong JSON type, a size
  // outside its bounds (vocab_size [1, 2^22], hidden_size [1, 2^16], state_size [1, 1024],
  // num_hidden_layers [1, 1024], expand [1, 16], conv_kernel [1, 64], time_step_rank
  // [1, 2^16] or "auto"), hidden_act other than silu, a non-positive layer_norm_epsilon or a
  // bos_token_id not below vocab_size: InvalidArgument naming the field. Never throws.
  static absl::StatusOr<MambaConfig> Parse(std::string_view json_text);
  // A config.json that Parse reads back to an equal config.
  std::string ToJson() const;

  bool operator==(const MambaConfig&) const = default;
};

// The model_type written in config.json, or InvalidArgument when the text is not a JSON
// object with a string model_type.
absl::StatusOr<std::string> ReadModelType(std::string_view json_text);

}  // namespace kvserve::model
