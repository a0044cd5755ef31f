// Names of layer types as Hugging Face configs spell them.
#include "cache/layer_type.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kvserve::cache {

const char* LayerTypeName(LayerType type) {
  switch (type) {
    case LayerType::kFullAttention:
      return "full_attention";
    case LayerType::kSlidingAttention:
      return "sliding_attention";
    case LayerType::kChunkedAttention:
      return "chunked_attention";
    case LayerType::kMambaState:
      return "mamba";
  }
  return "unknown";
}

// Attention types only: a decoder's layer_types never name a state layer (a Mamba model's
// layers follow from its model_type).
absl::StatusOr<LayerType> ParseLayerType(std::string_view name) {
  for (LayerType t :
       {LayerType::kFullAttention, LayerType::kSlidingAttention, LayerType::kChunkedAttention}) {
    if (name == LayerTypeName(t)) return t;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("layer type '", std::string(name),
                   "' is not supported; supported: full_attention, sliding_attention, "
                   "chunked_attention"));
}

}  // namespace kvserve::cache
