// The attention kind of one decoder layer, which decides its cache class and its mask.
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"

namespace kvserve::cache {

enum class LayerType {
  kFullAttention,     // sees every earlier token
  kSlidingAttention,  // sees itself and window-1 earlier tokens
  kChunkedAttention,  // sees earlier tokens of its own chunk (window = chunk size)
  kMambaState,        // no attention: a fixed-size convolution and SSM state (Mamba)
};

// What a cache needs to know about one layer of the model.
struct LayerSpec {
  LayerType type = LayerType::kFullAttention;
  // Sliding window or attention chunk size in tokens; 0 for full attention, >= 2 otherwise.
  int64_t window = 0;

  bool is_sliding() const {
    return type == LayerType::kSlidingAttention || type == LayerType::kChunkedAttention;
  }
  // A state-space layer: it keeps a summary of every token, which cannot be cropped.
  bool is_state() const { return type == LayerType::kMambaState; }
  bool operator==(const LayerSpec&) const = default;
};

// The Hugging Face name of a layer type ("full_attention", "sliding_attention", ...).
const char* LayerTypeName(LayerType type);
// Parses a Hugging Face layer_types entry; InvalidArgument naming the value otherwise.
absl::StatusOr<LayerType> ParseLayerType(std::string_view name);

}  // namespace kvserve::cache
