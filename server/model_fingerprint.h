// ModelFingerprint: a digest of everything a prefix snapshot depends on (weights, config,
// tokenizer, runtime and weight dtypes, layer types), so that a snapshot is only ever used
// with the model that made it.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "base/model_source.h"
#include "model/model.h"

namespace kvserve::server {

// 16 hex digits. Reads every byte of the weights (about 0.1 s per GB here; once, at start-up).
// Errors name the file that cannot be read.
absl::StatusOr<std::string> ModelFingerprint(const base::ModelSource& source,
                                             const model::ModelInfo& info);

}  // namespace kvserve::server
