// The embedded default model: a tiny Llama made in memory at start-up by the tiny-model maker
// and loaded through the same code as a folder on disk.
#pragma once

#include "absl/status/statusor.h"
#include "base/model_source.h"

namespace kvserve::model {

// The preset the embedded model uses (arch llama, preset small, seed 0).
inline constexpr char kEmbeddedModelDescription[] = "embedded llama/small (seed 0)";

// The in-memory files of the embedded default model.
absl::StatusOr<base::ModelSource> EmbeddedDefaultModel();

}  // namespace kvserve::model
