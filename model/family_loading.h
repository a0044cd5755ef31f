// What the families with a loader of their own (Mamba, BART: LoadModel dispatches to them by
// model_type) share when loading: their config.json parsed with errors that name the source,
// and their float32-on-the-CPU-only refusal.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/model_source.h"
#include "model/generation_config.h"
#include "model/model.h"
#include "model/transformer.h"

namespace kvserve::model {

// `source`'s config.json parsed by Config::Parse (a static taking its text); errors keep their
// code and name the source.
template <typename Config>
absl::StatusOr<Config> LoadFamilyConfig(const base::ModelSource& source) {
  absl::StatusOr<std::string> text = source.ReadText("config.json");
  if (!text.ok()) return text.status();
  absl::StatusOr<Config> config = Config::Parse(*text);
  if (!config.ok()) {
    return absl::Status(config.status().code(),
                        absl::StrCat(source.Describe(), "/", config.status().message()));
  }
  return config;
}

// `source`'s generation_config.json, when it has one, into info->generation (its eos_token_id,
// when set, replacing config.json's); errors name the source.
inline absl::Status ApplyFamilyGenerationConfig(const base::ModelSource& source, int64_t vocab_size,
                                                ModelInfo* info) {
  if (!source.Has("generation_config.json")) return absl::OkStatus();
  absl::StatusOr<std::string> text = source.ReadText("generation_config.json");
  if (!text.ok()) return text.status();
  absl::StatusOr<GenerationConfig> generation = GenerationConfig::Parse(*text, vocab_size);
  if (!generation.ok()) {
    return absl::Status(generation.status().code(),
                        absl::StrCat(source.Describe(), "/", generation.status().message()));
  }
  info->generation = *std::move(generation);
  if (!info->generation.eos_token_ids.empty()) info->eos_token_ids = info->generation.eos_token_ids;
  return absl::OkStatus();
}

// InvalidArgument naming `model_type` unless `options` ask for float32 weights and compute on
// the CPU (what the Mamba and BART forwards run).
inline absl::Status CheckFloat32OnCpu(std::string_view model_type,
                                      const TransformerOptions& options) {
  if (options.dtype != at::kFloat || !options.device.is_cpu() ||
      (options.weight_dtype.has_value() && *options.weight_dtype != at::kFloat)) {
    return absl::InvalidArgumentError(
        absl::StrCat("model_type '", std::string(model_type),
                     "' runs in float32 on the CPU only (dtype float32, weight_dtype auto or "
                     "float32, device cpu)"));
  }
  return absl::OkStatus();
}

}  // namespace kvserve::model
