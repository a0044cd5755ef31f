// MambaModel: Transformers' MambaForCausalLM (Mamba-1, the selective scan) over a ragged batch,
// loaded from a Hugging Face checkpoint, with its cache of per-layer convolution and SSM states.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "base/model_source.h"
#include "model/mamba_config.h"
#include "model/model.h"
#include "model/transformer.h"

namespace kvserve::model {

// Each layer: x + out_proj(y), where for h = RMSNorm(x): in_proj(h) splits into the SSM input
// and a gate z; the input runs through a causal depthwise conv1d (kernel conv_kernel) and SiLU
// into u; x_proj(u) splits into dt (time_step_rank), B and C (state_size each); dt =
// softplus(dt_proj(dt)); the scan keeps per channel a state s of state_size values,
// s <- exp(dt * A) * s + dt * B * u with A = -exp(A_log), and reads y = C . s + D * u;
// y is gated by SiLU(z). The cache of a sequence is a KvCache of MambaStateLayers (one per
// layer; cache::MakeCache builds them for the layer specs in info()). Computes in float32 on
// the CPU. Forward is not reentrant: only the engine thread calls it.
class MambaModel final : public Model {
 public:
  // Loads config.json (model_type "mamba") and the safetensors weights of `source`. Only
  // options.dtype float32 on the CPU is supported (InvalidArgument otherwise); weights in
  // F32/F16/BF16 are converted to float32. Errors name the file and the problem.
  static absl::StatusOr<std::unique_ptr<MambaModel>> Load(const base::ModelSource& source,
                                                          const TransformerOptions& options);

  // Runs every sequence's new tokens from the states in its cache (zeros for an empty or
  // absent cache) and replaces them with the states after those tokens. InvalidArgument for
  // an empty sequence, a token outside the vocabulary, rows that do not divide the tokens,
  // rows > 1 without a cache, or a cache that is not one MambaStateLayer per layer with the
  // sequence's rows; no cache has changed then.
  absl::StatusOr<ForwardOutput> Forward(const Batch& batch) override;
  const ModelInfo& info() const override { return info_; }
  const MambaConfig& config() const { return config_; }

 private:
  struct Layer {
    at::Tensor norm;       // [hidden]
    at::Tensor in_proj;    // [2 * d_inner, hidden]
    at::Tensor in_bias;    // [2 * d_inner] or undefined
    at::Tensor conv;       // [d_inner, 1, conv_kernel]
    at::Tensor conv_bias;  // [d_inner] or undefined
    at::Tensor x_proj;     // [time_step_rank + 2 * state_size, d_inner]
    at::Tensor dt_proj;    // [d_inner, time_step_rank]
    at::Tensor dt_bias;    // [d_inner]
    at::Tensor a;          // [d_inner, state_size]: -exp(A_log)
    at::Tensor d;          // [d_inner]
    at::Tensor out_proj;   // [hidden, d_inner]
    at::Tensor out_bias;   // [hidden] or undefined
  };

  MambaModel(MambaConfig config, ModelInfo info);
  absl::Status LoadWeights(const base::ModelSource& source);
  // One sequence's tokens [rows, n] through every layer; `states` (per layer conv, ssm) in and
  // out. Returns the final hidden states [rows, n, hidden].
  at::Tensor RunLayers(const at::Tensor& ids, std::vector<at::Tensor>* conv_states,
                       std::vector<at::Tensor>* ssm_states) const;

  MambaConfig config_;
  ModelInfo info_;
  std::vector<Layer> layers_;
  at::Tensor embed_;    // [vocab, hidden]
  at::Tensor norm_f_;   // [hidden]
  at::Tensor lm_head_;  // [vocab, hidden] (the embedding when tied)
};

// Loads `source` as the model its config.json's model_type names: MambaModel for "mamba",
// BartModel for "bart" (bart_model.h), Transformer otherwise. Errors as their Load functions.
absl::StatusOr<std::unique_ptr<Model>> LoadModel(const base::ModelSource& source,
                                                 const TransformerOptions& options);

}  // namespace kvserve::model
