// FakeModel: a deterministic Model for scheduler, engine and server tests, whose next token
// follows from (last token, position) and whose caches grow exactly as the real model's do.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cache/layer_type.h"
#include "model/model.h"

namespace kvserve::model::testing {

struct FakeModelOptions {
  std::string model_type = "fake";
  int64_t vocab_size = 64;                // >= 2
  int64_t num_layers = 2;                 // >= 1
  int64_t num_kv_heads = 2;               // >= 1
  int64_t head_dim = 4;                   // >= 1
  int64_t max_position_embeddings = 512;  // >= 1
  // One per layer; empty means full attention everywhere. Windows as cache::LayerSpec.
  std::vector<cache::LayerSpec> layer_specs;
  std::vector<int32_t> eos_token_ids;  // each in [0, vocab_size)
  std::optional<int32_t> bos_token_id;
  // K/V dtype and device of the caches the model fills.
  at::ScalarType dtype = at::kFloat;
  c10::Device device = c10::Device(c10::kCPU);
  // The token the model predicts after `last_token` at absolute position `position`; must
  // return an id in [0, vocab_size). Empty: FakeModel::DefaultNextToken.
  std::function<int32_t(int32_t last_token, int64_t position)> next_token;
};

// Logits of every position are kPeakLogit at the predicted token and 0 elsewhere, so greedy
// decoding yields exactly next_token(last, position) and sampling concentrates there.
// Keys appended to every layer hold the token id, values the absolute position (exact in
// float32), each broadcast over [1, kv_heads, n, head_dim]. Forward is not reentrant: only
// the engine thread calls it.
class FakeModel final : public model::Model {
 public:
  static constexpr float kPeakLogit = 20.0f;

  // InvalidArgument naming the field when `options` is out of range.
  static absl::StatusOr<std::unique_ptr<FakeModel>> Create(FakeModelOptions options);

  // (last_token + position + 1) mod vocab_size.
  static int32_t DefaultNextToken(int32_t last_token, int64_t position, int64_t vocab_size);

  // The token predicted after `last_token` at absolute `position` (the options' rule).
  int32_t NextToken(int32_t last_token, int64_t position) const;

  // Same contract as model::Model::Forward. InvalidArgument for an empty sequence, a token
  // id outside the vocabulary, a cache with another layer count or a rule returning an id
  // outside the vocabulary (all checked before any cache changes); a cache's own error,
  // annotated with the sequence and layer, when an update is refused.
  absl::StatusOr<model::ForwardOutput> Forward(const model::Batch& batch) override;
  const model::ModelInfo& info() const override { return info_; }

  // Forward calls and new tokens run so far, for tests of what the engine recomputes.
  int64_t num_forward_calls() const { return num_forward_calls_; }
  int64_t num_tokens_run() const { return num_tokens_run_; }

 private:
  FakeModel(FakeModelOptions options, model::ModelInfo info);

  FakeModelOptions options_;
  model::ModelInfo info_;
  int64_t num_forward_calls_ = 0;
  int64_t num_tokens_run_ = 0;
};

}  // namespace kvserve::model::testing
