// Model: the interface every model implementation (the real Transformer, Mamba, BART's
// encoder-decoder, a test FakeModel) offers to the engine: one forward over a ragged batch of
// sequences, each with its own cache.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cache/kv_cache.h"
#include "cache/layer_type.h"
#include "model/generation_config.h"

namespace kvserve::model {

// One sequence's share of a ragged batch.
struct SequenceInput {
  // The new tokens to run. With a cache they continue it (first position = cache->SeqLength());
  // without one they are the whole sequence from position 0.
  absl::Span<const int32_t> token_ids;
  // The sequence's own cache, or nullptr to run without one. Not owned.
  cache::KvCache* cache = nullptr;
  // Logits for every new position instead of only the last one.
  bool all_logits = false;
  // Batch rows of the sequence (beams or samples of one request): token_ids holds `rows`
  // runs of equally many tokens, row after row, every row at the same positions, and the
  // cache holds `rows` batch rows. The logits are then [rows, vocab] (all_logits: [rows, n,
  // vocab]).
  int64_t rows = 1;
  // Encoder-decoder models (ModelInfo::encoder_decoder()): the request's encoder input (its
  // prompt), which every step of the request passes; token_ids are then decoder tokens.
  // Empty for decoder-only models.
  absl::Span<const int32_t> encoder_token_ids;
  // With encoder_token_ids: their encoder output and cross K/V when already computed (a named
  // prefix's), which a cache without them then takes instead of computing them.
  std::shared_ptr<const cache::CrossAttentionState> encoder_state;
};

struct Batch {
  std::vector<SequenceInput> sequences;
};

struct ForwardOutput {
  // Per sequence, float32 on the host: [vocab] (last position) or [new_tokens, vocab]; with
  // rows > 1, [rows, vocab] or [rows, new_tokens, vocab].
  std::vector<at::Tensor> logits;
};

// What callers need to know about a loaded model.
struct ModelInfo {
  std::string model_type;
  int64_t vocab_size = 0;
  int64_t num_layers = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t max_position_embeddings = 0;
  std::vector<cache::LayerSpec> layer_specs;  // one per layer
  // generation_config.json's eos_token_id when it sets one, else config.json's.
  std::vector<int32_t> eos_token_ids;
  std::optional<int32_t> bos_token_id;
  // generation_config.json (all unset without one): the defaults of unset request fields.
  GenerationConfig generation;
  at::ScalarType dtype = at::kFloat;
  // Storage dtype of the projection weights (the LM head's), which may be narrower than
  // `dtype` on the CPU (TransformerOptions::weight_dtype).
  at::ScalarType weight_dtype = at::kFloat;
  // True when bfloat16 projection weights multiply activations rounded to bfloat16
  // (TransformerOptions::bf16_compute resolved to kNative with bfloat16 weights).
  bool bf16_activations = false;
  c10::Device device = c10::Device(c10::kCPU);
  // Encoder-decoder models (BART): the decoder's first tokens when the request names none
  // (decoder_start_token_id, then forced_bos_token_id when set); empty: a decoder-only model.
  std::vector<int32_t> decoder_start_ids;

  bool encoder_decoder() const { return !decoder_start_ids.empty(); }
};

class Model {
 public:
  virtual ~Model() = default;
  // Runs every sequence's new tokens, appending their K/V to each sequence's cache, and
  // returns the requested logits. On error (a cache refusing an update, bad token ids) the
  // caches of the batch may hold a partial step; callers crop or drop them. Engine thread.
  virtual absl::StatusOr<ForwardOutput> Forward(const Batch& batch) = 0;
  virtual const ModelInfo& info() const = 0;
};

}  // namespace kvserve::model
