// KvCache: one request's cache, a container of per-layer CacheLayers built for a model.
#pragma once

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/check.h"
#include "cache/cache_layer.h"
#include "cache/layer_type.h"

namespace kvserve::cache {

// Owns one CacheLayer per decoder layer. Container operations apply to every layer and are
// all-or-nothing: when one layer refuses (a crop that would need lost states, an index out
// of range), no layer has changed. Not thread-safe: owned by the engine thread.
class KvMemoryBudget;
class OffloadStream;
struct CrossAttentionState;

class KvCache {
 public:
  explicit KvCache(std::vector<std::unique_ptr<CacheLayer>> layers);
  // Gives its device bytes back to the budget, if attached.
  ~KvCache();
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  // A dynamic cache for a model with these layers: DynamicLayer for full attention,
  // DynamicSlidingWindowLayer for sliding and chunked layers, MambaStateLayer for state layers.
  // InvalidArgument when a sliding/chunked spec has a window below 2.
  static absl::StatusOr<std::unique_ptr<KvCache>> CreateDynamic(
      const std::vector<LayerSpec>& layer_specs);

  int num_layers() const { return static_cast<int>(layers_.size()); }
  // The model asks for its own layers: an index out of range is a broken invariant.
  CacheLayer& layer(int i) {
    KVSERVE_DCHECK(i >= 0 && i < num_layers()) << "layer " << i << " of " << num_layers();
    return *layers_[i];
  }
  const CacheLayer& layer(int i) const {
    KVSERVE_DCHECK(i >= 0 && i < num_layers()) << "layer " << i << " of " << num_layers();
    return *layers_[i];
  }

  // Updates layer `layer_index` with new keys/values ([batch, kv_heads, n, head_dim]) and
  // returns what attention must see; see CacheLayer::Update. The model calls this, layer by
  // layer in order, so that the container can stage storage around each update.
  // InvalidArgument for a layer index out of range, or for keys/values that do not match a
  // staged prefix of the layer (batch, kv_heads, head_dim, dtype, device); a staged prefix
  // stays staged when the update fails.
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

  // Holds `keys`/`values` ([batch, kv_heads, n, head_dim]; views are fine, they are not
  // copied) for layer `layer_index` until that layer's first Update, which then receives them
  // joined in front of its own keys/values as one update: a copied prefix reaches a layer
  // whose contents depend on how updates are split (ContentsDependOnUpdateSplit) as a cold
  // prefill would. The layer must be empty with nothing staged: FailedPrecondition
  // otherwise; InvalidArgument for a layer out of range or keys/values that are not 4-D of
  // one shape. Staged tokens count in SeqLength; they hold no storage of the cache's own.
  // Crop (n != 0) is refused while anything is staged; beam operations apply to staged rows.
  absl::Status StagePrefix(int layer_index, const at::Tensor& keys, const at::Tensor& values);

  // Tokens seen so far (layer 0's count, staged tokens included; every layer sees the same
  // tokens).
  int64_t SeqLength() const;
  // Largest length any layer can hold, -1 when unbounded.
  int64_t MaxLength() const;

  // Crop(n) on every layer; see CacheLayer::Crop. All-or-nothing.
  absl::Status Crop(int64_t n);
  // What Crop(n) would return, changing nothing.
  absl::Status CheckCrop(int64_t n) const;
  void ActivatePastRecording();
  // RetainPast on every layer (see CacheLayer::RetainPast): crops may reach back to any length.
  void RetainPast();

  // Batch rows held (the largest of the layers' and staged rows; 0 when empty).
  int64_t BatchSize() const;

  // Beam operations on every layer (see CacheLayer); all-or-nothing. The budget, if
  // attached, is told of the bytes they add or free.
  absl::Status Reorder(const at::Tensor& beam_idx);
  absl::Status SelectIndices(const at::Tensor& indices);
  absl::Status RepeatInterleave(int64_t repeats);

  MemoryUsage Memory() const;
  // Keeps `owner` (a SharedPrefixTracker reference to the snapshot whose K/V some layers read
  // in place, see Snapshot::LoadInto) while any layer reads a shared segment: a crop that
  // makes every layer copy what it keeps, or a Reset, lets it go.
  void HoldSharedOwner(std::shared_ptr<const void> owner) { shared_owner_ = std::move(owner); }
  // An encoder-decoder request's cross-attention side (cross_attention_state.h), kept with its
  // self-attention cache so that it lives and ends with it; null for decoder-only models.
  // Immutable: Clone shares it, Reset drops it; beam operations leave it (one encoder input
  // per request). Its bytes are not part of Memory().
  void set_cross_attention(std::shared_ptr<const CrossAttentionState> state) {
    cross_attention_ = std::move(state);
  }
  const std::shared_ptr<const CrossAttentionState>& cross_attention() const {
    return cross_attention_;
  }
  // Tokens the layers read from a shared segment (the most of any layer; 0: none).
  int64_t SharedPrefixLength() const;
  // A deep copy sharing no storage with this cache (not attached to any budget); a shared
  // prefix segment, immutable, stays shared and held.
  std::unique_ptr<KvCache> Clone() const;

  // Out-of-memory support (see KvMemoryBudget). Engine thread only.
  //
  // Accounts this cache's device bytes in `budget` (not owned; must outlive the cache or be
  // detached by destroying the cache first) from now on. Update then throws
  // compat::OutOfMemoryError when a growth takes the budget over its limit (or a fault is
  // injected); the layer has grown by then, and RollbackStep takes it back.
  void AttachBudget(KvMemoryBudget* budget);
  // Marks the start of a step: remembers every layer's length and, with an active budget,
  // keeps sliding layers' dropped tokens (past recording) until CommitStep, so that a step
  // that fails half-way can be rolled back exactly.
  void BeginStep();
  // The step succeeded: frees the states kept for a rollback.
  void CommitStep();
  // The step failed: crops every layer back to its length at BeginStep. Internal error when
  // a layer cannot be cropped (the cache must then be dropped).
  absl::Status RollbackStep();
  // Moves every layer that is not offloaded into an OffloadedLayer with the same contents,
  // its storage on the host (the out-of-memory fallback: dynamic becomes offloaded, static
  // offloaded_static, quantized stays quantized on the host). Returns the device bytes freed.
  int64_t ConvertToOffloaded();
  // Whether every layer is offloaded.
  bool fully_offloaded() const;
  // Undoes ConvertToOffloaded: every layer it wrapped goes back to the device, unwrapped
  // (layers offloaded by the cache's own strategy stay offloaded). Returns the device bytes
  // added (counted in the budget without a check: the caller looks at what is available).
  int64_t ConvertToResident();
  // Whether ConvertToOffloaded wrapped any layer that ConvertToResident has not unwrapped.
  bool converted_to_offloaded() const;
  void Reset();

 private:
  // Checks batch indices against every layer before any layer changes.
  absl::Status CheckIndices(const at::Tensor& indices, bool same_size) const;
  // Re-reads the device bytes and reports the difference to the budget.
  void SyncBudget();

  // A prefix waiting for its layer's first update (see StagePrefix).
  struct Staged {
    at::Tensor keys;    // [batch, kv_heads, n, head_dim]; undefined: nothing staged
    at::Tensor values;  // as keys
  };
  // Whether any layer has a staged prefix.
  bool has_staged() const;
  // Calls `fn` on every staged tensor (beam operations apply to staged rows too).
  void ForEachStaged(const std::function<void(at::Tensor&)>& fn);

  std::vector<std::unique_ptr<CacheLayer>> layers_;
  std::vector<Staged> staged_;          // per layer (empty: nothing ever staged)
  std::vector<Staged> staged_at_step_;  // staged_ at BeginStep, restored by RollbackStep
  KvMemoryBudget* budget_ = nullptr;    // not owned; null: no accounting
  int64_t accounted_device_bytes_ = 0;  // what this cache has reported to budget_
  std::vector<int64_t> step_start_;     // per layer: SeqLength at BeginStep
  // Per layer: its RollbackPoint at BeginStep (null where Crop undoes a step exactly).
  std::vector<std::unique_ptr<CacheLayer>> rollback_points_;
  bool recording_ = false;                         // past recording on for rollbacks
  std::vector<bool> converted_;                    // per layer: wrapped by ConvertToOffloaded
  std::shared_ptr<OffloadStream> offload_stream_;  // for layers converted to offloaded
  std::shared_ptr<const void> shared_owner_;       // see HoldSharedOwner; null: none
  std::shared_ptr<const CrossAttentionState> cross_attention_;  // null: decoder-only
};

// Checks one layer spec: sliding and chunked layers need a window >= 2.
absl::Status ValidateLayerSpec(const LayerSpec& spec, int layer_index);

}  // namespace kvserve::cache
