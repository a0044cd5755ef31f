// The validated form of a Hugging Face config.json of model_type "bart"
// (BartForConditionalGeneration: an encoder-decoder model with learned positions).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace kvserve::model {

// Every field resolved with Transformers' BartConfig defaults (field names as it spells them).
struct BartConfig {
  int64_t vocab_size = 50265;
  int64_t d_model = 1024;
  int64_t encoder_layers = 12;
  int64_t decoder_layers = 12;
  int64_t encoder_attention_heads = 16;
  int64_t decoder_attention_heads = 16;
  int64_t encoder_ffn_dim = 4096;
  int64_t decoder_ffn_dim = 4096;
  // Positions each learned table covers; the tables have 2 more rows (BART's offset).
  int64_t max_position_embeddings = 1024;
  std::string activation_function = "gelu";  // gelu | gelu_new | relu
  bool scale_embedding = false;              // embeddings times sqrt(d_model)
  bool tie_word_embeddings = true;           // lm_head = the shared embedding
  // Not in BartConfig: torch.nn.LayerNorm's default, which BART's layer norms use.
  double layer_norm_eps = 1e-5;
  std::optional<int32_t> pad_token_id = 1;
  std::optional<int32_t> bos_token_id = 0;
  std::vector<int32_t> eos_token_ids = {2};
  int32_t decoder_start_token_id = 2;
  // The first generated token, forced as Transformers' ForcedBOSTokenLogitsProcessor does.
  std::optional<int32_t> forced_bos_token_id;
  std::optional<int32_t> forced_eos_token_id = 2;
  std::string torch_dtype;  // as written; may be empty

  int64_t encoder_head_dim() const { return d_model / encoder_attention_heads; }
  int64_t decoder_head_dim() const { return d_model / decoder_attention_heads; }

  // Parses config.json (model_type must be "bart"). A field of the wrong JSON type, a size
  // outside its bounds (vocab_size [1, 2^22], d_model [1, 2^16], layers [1, 1024], heads
  // [1, 1024] dividing d_model, ffn dims [1, 2^18], max_position_embeddings [1, 2^20]), an
  // activation other than gelu/gelu_new/relu, or a token id not below vocab_size:
  // InvalidArgument naming the field. Never throws.
  static absl::StatusOr<BartConfig> Parse(std::string_view json_text);
  // A config.json that Parse reads back to an equal config.
  std::string ToJson() const;

  bool operator==(const BartConfig&) const = default;
};

}  // namespace kvserve::model
