// Building caches from specs (see cache_factory.h).
#include "cache/cache_factory.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "cache/dynamic_layer.h"
#include "cache/dynamic_sliding_window_layer.h"
#include "cache/fp8_layer.h"
#include "cache/hqq_quantizer.h"
#include "cache/mamba_state_layer.h"
#include "cache/offload_stream.h"
#include "cache/offloaded_layer.h"
#include "cache/quantized_layer.h"
#include "cache/quantizer.h"
#include "cache/quanto_quantizer.h"
#include "cache/static_layer.h"
#include "cache/static_sliding_window_layer.h"

namespace kvserve::cache {
namespace {

absl::StatusOr<std::unique_ptr<CacheLayer>> MakeLayer(const CacheSpec& spec,
                                                      const LayerSpec& layer) {
  // CheckLayerTypes admitted only 'dynamic' for state layers.
  if (layer.is_state()) return std::make_unique<MambaStateLayer>();
  switch (spec.implementation) {
    case CacheImplementation::kDynamic:
    case CacheImplementation::kOffloaded:
      if (layer.is_sliding()) {
        return std::make_unique<DynamicSlidingWindowLayer>(layer.type, layer.window);
      }
      return std::make_unique<DynamicLayer>();
    case CacheImplementation::kStatic:
    case CacheImplementation::kOffloadedStatic:
      if (layer.is_sliding()) {
        return std::make_unique<StaticSlidingWindowLayer>(layer.type, layer.window,
                                                          *spec.max_cache_len);
      }
      return std::make_unique<StaticLayer>(*spec.max_cache_len);
    case CacheImplementation::kQuantized: {
      const QuantizedSpec& q = spec.quantized;
      switch (q.backend) {
        case QuantizationBackend::kFp8:
          return std::make_unique<Fp8Layer>();
        case QuantizationBackend::kQuanto:
          return std::make_unique<QuantizedLayer>(
              std::make_shared<QuantoQuantizer>(q.nbits, q.axis_key, q.q_group_size),
              std::make_shared<QuantoQuantizer>(q.nbits, q.axis_value, q.q_group_size),
              q.residual_length);
        case QuantizationBackend::kHqq:
          return std::make_unique<QuantizedLayer>(
              std::make_shared<HqqQuantizer>(q.nbits, q.axis_key, q.q_group_size),
              std::make_shared<HqqQuantizer>(q.nbits, q.axis_value, q.q_group_size),
              q.residual_length);
      }
      break;
    }
    case CacheImplementation::kNone:
      break;
  }
  return absl::InternalError("no layer class for this cache spec");
}

// A quantized cache refuses sliding and chunked layers, as the reference does; a Mamba
// model's state layers take only 'dynamic' (the reference's MambaCache: every other strategy
// stores per-token keys/values, which a Mamba layer does not have).
absl::Status CheckLayerTypes(const CacheSpec& spec, const std::vector<LayerSpec>& layers) {
  const bool has_state =
      std::any_of(layers.begin(), layers.end(), [](const LayerSpec& l) { return l.is_state(); });
  if (has_state && spec.implementation != CacheImplementation::kDynamic &&
      spec.implementation != CacheImplementation::kNone) {
    const char* reason = spec.implementation == CacheImplementation::kQuantized ? "quantizes"
                         : spec.implementation == CacheImplementation::kOffloaded
                             ? "moves to the host layer by layer"
                         : spec.implementation == CacheImplementation::kOffloadedStatic
                             ? "preallocates and moves to the host"
                             : "preallocates up to max_cache_len";
    return absl::InvalidArgumentError(absl::StrCat(
        "cache_implementation '", std::string(CacheImplementationName(spec.implementation)),
        "' is not supported for the mamba family: a Mamba layer caches a fixed-size "
        "convolution and SSM state, not the per-token keys/values this strategy ",
        reason, "; use 'dynamic' (the reference's MambaCache)"));
  }
  if (spec.implementation != CacheImplementation::kQuantized) return absl::OkStatus();
  for (size_t i = 0; i < layers.size(); ++i) {
    if (layers[i].is_sliding()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cache_implementation 'quantized' supports only full_attention layers; layer ", i, " is ",
          std::string(LayerTypeName(layers[i].type))));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckSpecForModel(const CacheSpec& spec, const std::vector<LayerSpec>& layers,
                               int64_t head_dim) {
  if (absl::Status s = CheckLayerTypes(spec, layers); !s.ok()) return s;
  if (spec.implementation != CacheImplementation::kQuantized) return absl::OkStatus();
  const QuantizedSpec& q = spec.quantized;
  if (q.backend == QuantizationBackend::kFp8) return absl::OkStatus();
  // Quanto groups per token along axis 0, HQQ along axis 1; per-token groups split head_dim.
  const int per_token_axis = q.backend == QuantizationBackend::kQuanto ? 0 : 1;
  for (int axis : {q.axis_key, q.axis_value}) {
    const GroupAxis group_axis =
        axis == per_token_axis ? GroupAxis::kPerToken : GroupAxis::kPerChannel;
    absl::StatusOr<int64_t> group = EffectiveGroup(group_axis, q.q_group_size, head_dim);
    if (!group.ok()) return group.status();
  }
  return absl::OkStatus();
}

int64_t StaticCacheLength(int64_t max_length, std::optional<int64_t> configured) {
  return std::max<int64_t>(max_length - 1, configured.value_or(0));
}

absl::StatusOr<std::unique_ptr<KvCache>> MakeCache(const CacheSpec& spec,
                                                   const std::vector<LayerSpec>& layers) {
  if (!spec.use_cache()) return std::unique_ptr<KvCache>();
  if (spec.is_static() && (!spec.max_cache_len || *spec.max_cache_len <= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cache_implementation '", std::string(CacheImplementationName(spec.implementation)),
        "' needs max_cache_len > 0 (slots preallocated per layer)"));
  }
  for (size_t i = 0; i < layers.size(); ++i) {
    if (absl::Status s = ValidateLayerSpec(layers[i], static_cast<int>(i)); !s.ok()) return s;
  }
  if (absl::Status s = CheckLayerTypes(spec, layers); !s.ok()) return s;
  std::shared_ptr<OffloadStream> stream;
  if (spec.is_offloaded()) stream = std::make_shared<OffloadStream>();
  std::vector<std::unique_ptr<CacheLayer>> made;
  made.reserve(layers.size());
  for (const LayerSpec& layer : layers) {
    absl::StatusOr<std::unique_ptr<CacheLayer>> l = MakeLayer(spec, layer);
    if (!l.ok()) return l.status();
    const bool offload =
        spec.is_offloaded() && !(layer.is_sliding() && spec.offload_only_non_sliding);
    if (offload) {
      made.push_back(std::make_unique<OffloadedLayer>(std::move(*l), stream));
    } else {
      made.push_back(std::move(*l));
    }
  }
  return std::make_unique<KvCache>(std::move(made));
}

absl::StatusOr<std::unique_ptr<EncoderDecoderCache>> MakeEncoderDecoderCache(
    const CacheSpec& spec, const std::vector<LayerSpec>& decoder_layers, int64_t encoder_length) {
  if (!spec.use_cache()) return std::unique_ptr<EncoderDecoderCache>();
  if (spec.implementation == CacheImplementation::kQuantized) {
    return absl::InvalidArgumentError(
        "cache_implementation 'quantized' is not supported for encoder-decoder models; "
        "allowed: dynamic, static, offloaded, offloaded_static");
  }
  absl::StatusOr<std::unique_ptr<KvCache>> self_cache = MakeCache(spec, decoder_layers);
  if (!self_cache.ok()) return self_cache.status();
  CacheSpec cross_spec;  // dynamic
  if (spec.is_static()) {
    cross_spec = spec;
    cross_spec.max_cache_len = encoder_length;
  }
  absl::StatusOr<std::unique_ptr<KvCache>> cross_cache =
      MakeCache(cross_spec, std::vector<LayerSpec>(decoder_layers.size()));
  if (!cross_cache.ok()) return cross_cache.status();
  return EncoderDecoderCache::Create(std::move(*self_cache), std::move(*cross_cache));
}

}  // namespace kvserve::cache
