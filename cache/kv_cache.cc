// The per-request cache container (see kv_cache.h).
#include "cache/kv_cache.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "cache/dynamic_layer.h"
#include "cache/dynamic_sliding_window_layer.h"

namespace kvserve::cache {

absl::Status ValidateLayerSpec(const LayerSpec& spec, int layer_index) {
  if (spec.is_sliding() && spec.window < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer ", layer_index, " is ", LayerTypeName(spec.type), " with a window of ",
                     spec.window, " tokens; the window must be >= 2"));
  }
  return absl::OkStatus();
}

KvCache::KvCache(std::vector<std::unique_ptr<CacheLayer>> layers) : layers_(std::move(layers)) {}

absl::StatusOr<std::unique_ptr<KvCache>> KvCache::CreateDynamic(
    const std::vector<LayerSpec>& layer_specs) {
  std::vector<std::unique_ptr<CacheLayer>> layers;
  layers.reserve(layer_specs.size());
  for (size_t i = 0; i < layer_specs.size(); ++i) {
    const LayerSpec& spec = layer_specs[i];
    if (absl::Status s = ValidateLayerSpec(spec, static_cast<int>(i)); !s.ok()) return s;
    if (spec.is_sliding()) {
      layers.push_back(std::make_unique<DynamicSlidingWindowLayer>(spec.type, spec.window));
    } else {
      layers.push_back(std::make_unique<DynamicLayer>());
    }
  }
  return std::make_unique<KvCache>(std::move(layers));
}

absl::StatusOr<LayerView> KvCache::Update(int layer_index, const at::Tensor& keys,
                                          const at::Tensor& values) {
  CacheLayer& layer = *layers_[layer_index];
  layer.BeforeUpdate();
  for (size_t next = layer_index + 1; next < layers_.size(); ++next) {
    if (layers_[next]->offloaded()) {
      layers_[next]->StartPrefetch();
      break;
    }
  }
  absl::StatusOr<LayerView> view = layer.Update(keys, values);
  layer.AfterUpdate();
  return view;
}

void KvCache::PrepareForward() {
  for (auto& layer : layers_) {
    if (layer->offloaded()) {
      layer->StartPrefetch();
      return;
    }
  }
}

int64_t KvCache::SeqLength() const { return layers_.empty() ? 0 : layers_[0]->SeqLength(); }

int64_t KvCache::MaxLength() const {
  int64_t max_length = -1;
  for (const auto& layer : layers_) {
    const int64_t m = layer->MaxLength();
    if (m < 0) return -1;
    max_length = std::max(max_length, m);
  }
  return max_length;
}

absl::Status KvCache::Crop(int64_t n) {
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (absl::Status s = layers_[i]->CheckCrop(n); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("layer ", i, ": ", s.message()));
    }
  }
  for (auto& layer : layers_) {
    if (absl::Status s = layer->Crop(n); !s.ok()) return s;  // unreachable after the check
  }
  return absl::OkStatus();
}

void KvCache::ActivatePastRecording() {
  for (auto& layer : layers_) layer->ActivatePastRecording();
}

absl::Status KvCache::CheckIndices(const at::Tensor& indices, bool same_size) const {
  for (const auto& layer : layers_) {
    if (layer->BatchSize() == 0) continue;
    return CheckBatchIndices(indices, layer->BatchSize(), same_size);
  }
  return absl::OkStatus();
}

absl::Status KvCache::Reorder(const at::Tensor& beam_idx) {
  if (absl::Status s = CheckIndices(beam_idx, true); !s.ok()) return s;
  for (auto& layer : layers_) {
    if (absl::Status s = layer->Reorder(beam_idx); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status KvCache::SelectIndices(const at::Tensor& indices) {
  if (absl::Status s = CheckIndices(indices, false); !s.ok()) return s;
  for (auto& layer : layers_) {
    if (absl::Status s = layer->SelectIndices(indices); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status KvCache::RepeatInterleave(int64_t repeats) {
  if (repeats < 1) return absl::InvalidArgumentError("repeats must be >= 1");
  for (auto& layer : layers_) {
    if (absl::Status s = layer->RepeatInterleave(repeats); !s.ok()) return s;
  }
  return absl::OkStatus();
}

MemoryUsage KvCache::Memory() const {
  MemoryUsage usage;
  for (const auto& layer : layers_) usage += layer->Memory();
  return usage;
}

std::unique_ptr<KvCache> KvCache::Clone() const {
  std::vector<std::unique_ptr<CacheLayer>> copies;
  copies.reserve(layers_.size());
  for (const auto& layer : layers_) copies.push_back(layer->Clone());
  return std::make_unique<KvCache>(std::move(copies));
}

void KvCache::Reset() {
  for (auto& layer : layers_) layer->Reset();
}

}  // namespace kvserve::cache
