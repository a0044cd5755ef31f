// Test helpers: seeded tiny models made in memory and loaded through the real loader.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "base/model_source.h"
#include "model/tiny_model_maker.h"
#include "model/transformer.h"

namespace kvserve::model::testing {

// Loads `arch`/`preset` with seed 7, after `tweak` edits the config (layer types, window).
inline std::unique_ptr<Transformer> LoadTinyModel(
    const std::string& arch, const std::string& preset = "tiny",
    const std::function<void(ModelConfig&)>& tweak = {}) {
  absl::StatusOr<ModelConfig> config = PresetConfig(arch, preset);
  EXPECT_TRUE(config.ok()) << config.status();
  if (!config.ok()) return nullptr;
  if (tweak) tweak(*config);
  auto files = MakeModelFiles(*config, 7, WeightsDtype::kF32);
  EXPECT_TRUE(files.ok()) << files.status();
  if (!files.ok()) return nullptr;
  auto model = Transformer::Load(base::ModelSource::FromMemory(*files), {});
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *std::move(model) : nullptr;
}

// A llama whose first layer uses chunked attention (chunk 8) and second full attention.
inline void MakeChunked(ModelConfig& c) {
  c.attention_chunk_size = 8;
  c.layer_types = {cache::LayerType::kChunkedAttention, cache::LayerType::kFullAttention};
}

// Deterministic pseudo-random prompt of `n` ids below 256 (byte tokens).
inline std::vector<int32_t> Prompt(int n, int salt = 0) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back((i * 37 + salt * 101 + 11) % 250 + 3);
  return ids;
}

inline float MaxAbsDiff(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<float>();
}

}  // namespace kvserve::model::testing
