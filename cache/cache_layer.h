// CacheLayer: the interface of one decoder layer's K/V store, one implementation per strategy.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cache/layer_type.h"
#include "cache/memory_usage.h"

namespace kvserve::cache {

// What attention must see after an update, as up to two segments read in order: an optional
// shared read-only prefix segment (prefix_keys/prefix_values, every column valid), then the
// layer's own columns (keys/values). The columns of both, counted from the first prefix column,
// hold the tokens at absolute positions kv_offset, kv_offset + 1, ...; of the own columns only
// [0, num_valid) are tokens, later ones are unused slots of a preallocated buffer, which
// attention must mask. The prefix segment has one row, which every batch row of keys/values
// reads (the rows of one request share their prompt): attention walks both segments with one
// softmax and never writes into either.
struct LayerView {
  at::Tensor keys;    // [batch, kv_heads, kv_len, head_dim]
  at::Tensor values;  // [batch, kv_heads, kv_len, head_dim]
  int64_t kv_offset = 0;
  int64_t num_valid = 0;
  at::Tensor prefix_keys{};    // [1, kv_heads, prefix_len, head_dim]; undefined: no prefix
  at::Tensor prefix_values{};  // [1, kv_heads, prefix_len, head_dim]

  // Columns of the shared prefix segment (0 without one).
  int64_t prefix_length() const { return prefix_keys.defined() ? prefix_keys.size(2) : 0; }
};

// One layer's K/V store. Storage is allocated lazily on the first Update; dtype, device,
// batch, heads and head_dim come from that first key/value pair. Not thread-safe: only the
// engine thread touches a live cache.
class CacheLayer {
 public:
  virtual ~CacheLayer() = default;

  // Appends `keys`/`values` ([batch, kv_heads, new_tokens, head_dim], same dtype/device as
  // earlier updates) and returns what attention over the new tokens must see. The returned
  // tensors may alias internal storage and are valid until the next mutating call.
  // On failure (overflow of a fixed-size layer, shape mismatch) the layer is unchanged.
  virtual absl::StatusOr<LayerView> Update(const at::Tensor& keys, const at::Tensor& values) = 0;

  // Tokens seen so far: the absolute position the next token will take.
  virtual int64_t SeqLength() const = 0;
  // Largest number of tokens the layer can hold, or -1 when it grows without bound.
  virtual int64_t MaxLength() const = 0;
  // Batch size of the stored tensors, or 0 before the first update.
  virtual int64_t BatchSize() const = 0;

  // Rolls back the last -n tokens (n < 0); n == 0 frees recorded states that the next
  // forward will not read. Returns FailedPrecondition/OutOfRange with the reason when the
  // states needed are gone; the layer is then unchanged.
  virtual absl::Status Crop(int64_t n) = 0;
  // What Crop(n) would return, without changing anything (plan, then commit).
  virtual absl::Status CheckCrop(int64_t n) const { return absl::OkStatus(); }
  // Makes layers that drop old tokens (sliding windows) keep them until the next Crop, so
  // that a later Crop can roll back. Sticky. A no-op for layers that never drop tokens.
  virtual void ActivatePastRecording() {}
  // Past recording that no Crop ends: every token is kept for the layer's whole life, so that
  // a crop may reach back to any earlier length (a session's cache, whose turns crop to the
  // common prefix of the next conversation). Sticky. A no-op for layers that never drop
  // tokens; layers that cannot record (static sliding windows) keep refusing such crops.
  virtual void RetainPast() {}

  // Beam helpers, on the batch dimension. `indices` is an int64 tensor of row indices.
  // Reorder keeps the batch size; SelectIndices keeps the listed rows; RepeatInterleave
  // repeats each row `repeats` times, adjacent. No-ops on an empty layer.
  virtual absl::Status Reorder(const at::Tensor& beam_idx) = 0;
  virtual absl::Status SelectIndices(const at::Tensor& indices) = 0;
  virtual absl::Status RepeatInterleave(int64_t repeats) = 0;

  // Bytes of K/V storage the layer holds now (allocated buffers, not just used slots).
  virtual MemoryUsage Memory() const = 0;
  // A deep copy: shares no storage with this layer.
  virtual std::unique_ptr<CacheLayer> Clone() const = 0;
  // Drops every stored token and frees the storage (the layer is as if new).
  virtual void Reset() = 0;

  virtual LayerType type() const = 0;

  // Shared prefix segments (see PrefixKvMode in shared_prefix.h). Makes the layer, which must be
  // empty, read `keys`/`values` ([1, kv_heads, n, head_dim], immutable views of a snapshot that
  // the caller keeps alive) in place as its first n tokens instead of copying them; later
  // updates go to the layer's own tail, and a crop, rollback or row change never writes into
  // the segment (a crop into it copies what stays). Unimplemented (the default) for strategies
  // that must keep their own copy: the caller then copies the tokens with Update.
  virtual absl::Status AttachSharedPrefix(const at::Tensor& keys, const at::Tensor& values) {
    return absl::UnimplementedError("this cache strategy keeps its own copy of a prefix");
  }
  // Tokens the layer reads from a shared segment now (0 without one).
  virtual int64_t SharedPrefixLength() const { return 0; }

  // True when what the layer stores depends on how its tokens were split into updates (a
  // quantized layer keeps its first update's tokens quantized and later ones in a residual),
  // so that a copied prefix must reach it in the same update as the tokens after it.
  virtual bool ContentsDependOnUpdateSplit() const { return false; }

  // Rollback support for a step that fails half-way (KvCache::BeginStep/RollbackStep). For a
  // layer whose Crop cannot undo an update exactly (a quantized layer may requantize), a
  // copy of its state that shares storage with it: a valid rollback point as long as only
  // Update runs in between, since updates replace or append to storage but never change
  // stored tokens in place. Null (the default) when Crop(-n) undoes updates exactly.
  virtual std::unique_ptr<CacheLayer> RollbackPoint() const { return nullptr; }
  // Returns the layer to a point RollbackPoint() made.
  virtual void RestoreRollbackPoint(std::unique_ptr<CacheLayer> point) {}

  // Offloading support (see OffloadedLayer and KvCache::Update); layers that always stay
  // where they were created keep the defaults.
  //
  // Calls `fn` on every defined tensor the layer stores; `fn` may replace the tensor with a
  // copy of the same shape and dtype on another device. Returns false, without calling `fn`,
  // when the layer cannot have its storage moved (the default).
  virtual bool ForEachTensor(const std::function<void(at::Tensor&)>& fn) { return false; }
  // True when the layer's storage lives on the host between its updates.
  virtual bool offloaded() const { return false; }
  // Starts bringing the storage to the device ahead of the next update (asynchronous on
  // CUDA, on a side stream).
  virtual void StartPrefetch() {}
  // Called by KvCache::Update right before and right after Update: make the storage
  // resident on the device, then write it back to the host.
  virtual void BeforeUpdate() {}
  virtual void AfterUpdate() {}
};

}  // namespace kvserve::cache
