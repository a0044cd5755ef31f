// MakeCache: builds a request's KvCache from a CacheSpec and the model's layer types.
#pragma once

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "cache/cache_spec.h"
#include "cache/encoder_decoder_cache.h"
#include "cache/kv_cache.h"
#include "cache/layer_type.h"

namespace kvserve::cache {

// One layer per entry of `layers`, of the class the spec and the layer type call for:
//   dynamic / offloaded:        DynamicLayer, DynamicSlidingWindowLayer (sliding, chunked);
//   static / offloaded_static:  StaticLayer, StaticSlidingWindowLayer (window kept, rolling);
//   quantized:                  QuantizedLayer (quanto, hqq) or Fp8Layer (fp8);
// with offloaded layers wrapped in OffloadedLayer (sliding/chunked ones stay on the device
// when spec.offload_only_non_sliding). Storage is allocated lazily on each layer's first
// update. Returns null for use_cache=false. InvalidArgument, naming the reason, when a
// static spec has no max_cache_len, a quantized spec meets a sliding or chunked layer (as
// the reference refuses), or a layer spec is invalid.
absl::StatusOr<std::unique_ptr<KvCache>> MakeCache(const CacheSpec& spec,
                                                   const std::vector<LayerSpec>& layers);

// Whether `spec` can serve a model with `layers` of `head_dim`, checked before any cache is
// built (so a request is refused at validation, not at its first step). InvalidArgument
// starting with the parameter at fault: a quantized cache meets a sliding or chunked layer
// ("cache_implementation ..."), or a per-token q_group_size does not divide head_dim
// ("cache_config.q_group_size ...").
absl::Status CheckSpecForModel(const CacheSpec& spec, const std::vector<LayerSpec>& layers,
                               int64_t head_dim);

// The cache of an encoder-decoder model as the reference's generate() builds it: the
// self-attention cache from `spec` and `decoder_layers`; the cross-attention cache (full
// attention, one layer per decoder layer) dynamic for 'dynamic' and 'offloaded', and for
// 'static'/'offloaded_static' of the same kind with max_cache_len = `encoder_length`. Returns
// null for use_cache=false. InvalidArgument for 'quantized' (the reference refuses quantized
// caches for encoder-decoder models) and for anything MakeCache refuses.
absl::StatusOr<std::unique_ptr<EncoderDecoderCache>> MakeEncoderDecoderCache(
    const CacheSpec& spec, const std::vector<LayerSpec>& decoder_layers, int64_t encoder_length);

// The static cache length the reference's generate() uses: max(max_length - 1,
// configured), where max_length = prompt + max_new_tokens (the last token gets no K/V).
int64_t StaticCacheLength(int64_t max_length, std::optional<int64_t> configured);

}  // namespace kvserve::cache
