// KvCache: one request's cache, a container of per-layer CacheLayers built for a model.
#pragma once

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cache/cache_layer.h"
#include "cache/layer_type.h"

namespace kvserve::cache {

// Owns one CacheLayer per decoder layer. Container operations apply to every layer and are
// all-or-nothing: when one layer refuses (a crop that would need lost states, an index out
// of range), no layer has changed. Not thread-safe: owned by the engine thread.
class KvCache {
 public:
  explicit KvCache(std::vector<std::unique_ptr<CacheLayer>> layers);

  // A dynamic cache for a model with these layers: DynamicLayer for full attention,
  // DynamicSlidingWindowLayer for sliding and chunked layers. InvalidArgument when a
  // sliding/chunked spec has a window below 2.
  static absl::StatusOr<std::unique_ptr<KvCache>> CreateDynamic(
      const std::vector<LayerSpec>& layer_specs);

  int num_layers() const { return static_cast<int>(layers_.size()); }
  CacheLayer& layer(int i) { return *layers_[i]; }
  const CacheLayer& layer(int i) const { return *layers_[i]; }

  // Updates layer `layer_index` with new keys/values ([batch, kv_heads, n, head_dim]) and
  // returns what attention must see; see CacheLayer::Update. The model calls this, layer by
  // layer in order, so that the container can stage storage around each update.
  // With offloaded layers, the layer is made resident first (waiting for its prefetch),
  // the next offloaded layer is prefetched while this one computes, and the layer is written
  // back to the host after its update.
  absl::StatusOr<LayerView> Update(int layer_index, const at::Tensor& keys,
                                   const at::Tensor& values);
  // Starts prefetching the first offloaded layer; the model may call it at the start of a
  // forward so that layer 0's fetch overlaps the embedding. A no-op without offloading.
  // (The reference instead prefetches layer 0 at the end of every forward; kvserve keeps
  // every offloaded layer on the host between forwards.)
  void PrepareForward();

  // Tokens seen so far (layer 0's count; every layer sees the same tokens).
  int64_t SeqLength() const;
  // Largest length any layer can hold, -1 when unbounded.
  int64_t MaxLength() const;

  // Crop(n) on every layer; see CacheLayer::Crop. All-or-nothing.
  absl::Status Crop(int64_t n);
  void ActivatePastRecording();

  absl::Status Reorder(const at::Tensor& beam_idx);
  absl::Status SelectIndices(const at::Tensor& indices);
  absl::Status RepeatInterleave(int64_t repeats);

  MemoryUsage Memory() const;
  // A deep copy sharing no storage with this cache.
  std::unique_ptr<KvCache> Clone() const;
  void Reset();

 private:
  // Checks batch indices against every layer before any layer changes.
  absl::Status CheckIndices(const at::Tensor& indices, bool same_size) const;

  std::vector<std::unique_ptr<CacheLayer>> layers_;
};

// Checks one layer spec: sliding and chunked layers need a window >= 2.
absl::Status ValidateLayerSpec(const LayerSpec& spec, int layer_index);

}  // namespace kvserve::cache
