// The embedded default model (see embedded_model.h).
#include "model/embedded_model.h"

#include "model/tiny_model_maker.h"

namespace kvserve::model {

absl::StatusOr<base::ModelSource> EmbeddedDefaultModel() {
  absl::StatusOr<std::map<std::string, std::string>> files =
      MakeTinyModel({.arch = "llama", .preset = "small", .seed = 0});
  if (!files.ok()) return files.status();
  return base::ModelSource::FromMemory(*std::move(files));
}

}  // namespace kvserve::model
