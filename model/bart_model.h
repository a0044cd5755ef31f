// BartModel: Transformers' BartForConditionalGeneration (text): a bidirectional encoder and a
// causal decoder with cross-attention, learned positions, post-LayerNorm layers; its requests
// cache in a cache::EncoderDecoderCache (self-attention of any strategy, cross-attention once).
#pragma once

#include <ATen/ATen.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "base/model_source.h"
#include "cache/cross_attention_state.h"
#include "cache/encoder_decoder_cache.h"
#include "model/bart_config.h"
#include "model/generator.h"
#include "model/model.h"
#include "model/transformer.h"

namespace kvserve::model {

// Embeddings: shared[ids] * (sqrt(d_model) if scale_embedding) + positions[past + i + 2]
// (BART's learned tables are offset by 2), then layernorm_embedding. Encoder layer:
// h = LN(h + SelfAttn(h)); h = LN(h + fc2(act(fc1(h)))). Decoder layer: the same with causal
// self-attention, and between the two LN(h + CrossAttn(h, encoder output)). Logits:
// lm_head(h) + final_logits_bias, lm_head the shared embedding when tied. Computes in float32
// on the CPU. Not reentrant: one thread (the engine's) calls Forward/Encode/Decode at a time.
//
// Two ways to cache a request: Decode over a cache::EncoderDecoderCache (a self-attention
// cache of the request's strategy and a cross-attention cache filled on the first call:
// GenerateBart, kvserve-generate), or Forward, the engine's Model interface, over the
// request's self-attention KvCache, which then carries the request's encoder output and cross
// K/V as its cache::CrossAttentionState (computed at the request's first step).
class BartModel final : public Model {
 public:
  // Loads config.json (model_type "bart") and the safetensors weights of `source`. Only
  // options.dtype float32 on the CPU is supported (InvalidArgument otherwise); weights in
  // F32/F16/BF16 are converted to float32. Errors name the file and the problem.
  static absl::StatusOr<std::unique_ptr<BartModel>> Load(const base::ModelSource& source,
                                                         const TransformerOptions& options);

  const BartConfig& config() const { return config_; }
  // The decoder's side: layer_specs holds one full-attention spec per decoder layer (what the
  // self-attention cache is built for); num_kv_heads and head_dim are the decoder's.
  const ModelInfo& info() const override { return info_; }

  // The engine's forward: each sequence's token_ids are decoder tokens continuing its cache
  // (or its whole decoder sequence without one) and encoder_token_ids its encoder input. A
  // cache without a CrossAttentionState for that input gets one (encoder_state when it is
  // that input's, else the encoder and every layer's cross K/V computed once); later steps
  // read it. InvalidArgument, before anything
  // changes, for a sequence without encoder input, bad ids or rows, positions past
  // max_position_embeddings, or a cache of another layer count.
  absl::StatusOr<ForwardOutput> Forward(const Batch& batch) override;

  // The encoder output of `rows` runs of equally many ids ([rows * n] in, [rows, n, d_model]
  // out). InvalidArgument for no ids, rows that do not divide them, a run longer than
  // max_position_embeddings or an id outside the vocabulary.
  absl::StatusOr<at::Tensor> Encode(absl::Span<const int32_t> ids, int64_t rows = 1) const;

  // Runs decoder tokens ([rows * n]: rows runs of n, continuing the self-attention cache at
  // position cache->SeqLength(), or the whole decoder sequence without a cache) against
  // `encoder_output` ([rows or 1, encoder_len, d_model]). With a cache, each layer's
  // cross-attention K/V come from cache->CrossAttention (projected on its first call only);
  // without one they are projected every call. Returns float32 logits: [vocab] for one row's
  // last position, [rows, vocab] for several rows, with a leading [n] / [rows, n] dimension
  // when all_logits. InvalidArgument (nothing changed) for bad ids or rows, positions past
  // max_position_embeddings, an encoder output of another width or batch, or a cache with
  // another layer count; a cache's refusal mid-way leaves a partial step (callers crop).
  absl::StatusOr<at::Tensor> Decode(absl::Span<const int32_t> ids, int64_t rows,
                                    const at::Tensor& encoder_output,
                                    cache::EncoderDecoderCache* cache, bool all_logits = false);

  // Cross-attention K/V projections computed so far, one per decoder layer and call that
  // needed them (the measure of "computed once per request").
  // Any thread may read it.
  int64_t cross_projections() const { return cross_projections_.load(); }

 private:
  struct Attention {
    at::Tensor q, q_bias, k, k_bias, v, v_bias, out, out_bias;  // [d_model, d_model] / [d_model]
  };
  struct Norm {
    at::Tensor weight, bias;  // [d_model]
  };
  struct Layer {
    Attention self_attn;
    Norm self_attn_norm;
    Attention cross_attn;                     // decoder layers only
    Norm cross_attn_norm;                     // decoder layers only
    at::Tensor fc1, fc1_bias, fc2, fc2_bias;  // [ffn, d_model], [ffn], [d_model, ffn], [d_model]
    Norm final_norm;
  };

  // What a decoder layer's cross-attention reads: its cached or freshly projected K/V.
  using CrossSource = std::function<absl::StatusOr<cache::LayerView>(const Layer&, int)>;

  BartModel(BartConfig config, ModelInfo info);
  // Checks decoder ids against the positions the cache leaves them.
  absl::Status CheckDecoderInput(absl::Span<const int32_t> ids, int64_t rows,
                                 const cache::KvCache* self_cache) const;
  // The decoder over `self_cache` (null: no cache) with cross K/V from `cross`; as Decode.
  absl::StatusOr<at::Tensor> RunDecoder(absl::Span<const int32_t> ids, int64_t rows,
                                        cache::KvCache* self_cache, const CrossSource& cross,
                                        bool all_logits);
  // The encoder output and every layer's cross K/V for one encoder input (batch 1).
  absl::StatusOr<std::shared_ptr<const cache::CrossAttentionState>> ComputeCrossState(
      absl::Span<const int32_t> encoder_ids);
  absl::Status LoadWeights(const base::ModelSource& source);
  // Token embeddings plus learned positions from `past`, through layernorm_embedding:
  // ids [rows, n] -> [rows, n, d_model].
  at::Tensor Embed(const at::Tensor& ids, const at::Tensor& position_table, const Norm& norm,
                   int64_t past) const;
  at::Tensor Feedforward(const Layer& layer, const at::Tensor& x) const;
  // The cross K/V of `layer` for `rows` rows: [rows, heads, encoder_len, head_dim] each.
  std::pair<at::Tensor, at::Tensor> ProjectCross(const Layer& layer,
                                                 const at::Tensor& encoder_output, int64_t rows);

  BartConfig config_;
  ModelInfo info_;
  std::vector<Layer> encoder_layers_;
  std::vector<Layer> decoder_layers_;
  at::Tensor shared_;             // [vocab, d_model]
  at::Tensor encoder_positions_;  // [max_position_embeddings + 2, d_model]
  at::Tensor decoder_positions_;  // [max_position_embeddings + 2, d_model]
  Norm encoder_embedding_norm_;
  Norm decoder_embedding_norm_;
  at::Tensor lm_head_;            // [vocab, d_model] (shared_ when tied)
  at::Tensor final_logits_bias_;  // [vocab]
  std::atomic<int64_t> cross_projections_ = 0;
};

// Generates from `encoder_ids` (non-empty) as Transformers' generate() does for
// BartForConditionalGeneration: the decoder starts from `decoder_prompt`, or
// [decoder_start_token_id] when it is empty; the first generated token after a one-token
// decoder input is forced_bos_token_id when set, and the last one allowed by
// max_new_tokens forced_eos_token_id when set. With `cache` (empty, from
// MakeEncoderDecoderCache) the decoder input is prefilled once and each step runs one token;
// with nullptr each step recomputes the whole decoder sequence (use_cache=False).
// prompt_tokens counts the encoder ids; prefill_ms includes the encoder.
absl::StatusOr<GenerateResult> GenerateBart(BartModel& model, absl::Span<const int32_t> encoder_ids,
                                            absl::Span<const int32_t> decoder_prompt,
                                            cache::EncoderDecoderCache* cache,
                                            const GenerateOptions& options);

}  // namespace kvserve::model
