// StaticBuffers: the preallocated key and value buffers the static layer classes share.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "cache/cache_layer.h"

namespace kvserve::cache {

// Checks a static layer update: 4-D keys/values with equal batch, heads and token count,
// matching the stored buffers (batch, heads, head_dims, dtype, device) when those exist.
// InvalidArgument describing the mismatch otherwise.
absl::Status CheckStaticUpdate(const at::Tensor& keys, const at::Tensor& values,
                               const at::Tensor& stored_keys, const at::Tensor& stored_values);

// The length a layer of `length` tokens keeps after Crop(n): n < 0 drops -n tokens (down to
// 0), 0 < n < length keeps the first n (the legacy absolute form), anything else keeps all.
int64_t CropTarget(int64_t length, int64_t n);

// Zero-initialised [batch, kv_heads, slots, head_dim] keys and values (keys and values may
// differ in head_dim, as in MLA), allocated on the first update. Batch operations act on
// dimension 0 and are no-ops while nothing is allocated. Not thread-safe (its layer's).
class StaticBuffers {
 public:
  // Allocates `slots` zeroed slots shaped after `keys`/`values` when nothing is allocated yet.
  void EnsureAllocated(const at::Tensor& keys, const at::Tensor& values, int64_t slots);
  bool defined() const { return keys_.defined(); }
  int64_t batch_size() const { return keys_.defined() ? keys_.size(0) : 0; }

  // Zeroes slots [from, from + count), so that they look as if never written.
  void ZeroSlots(int64_t from, int64_t count);
  // Beam reorder (same_size) or row selection; InvalidArgument for bad indices.
  absl::Status SelectRows(const at::Tensor& indices, bool same_size);
  absl::Status RepeatInterleave(int64_t repeats);
  MemoryUsage Memory() const;
  // A deep copy (contiguous clones).
  StaticBuffers Clone() const;
  void Reset();
  // Calls `fn` on the keys and the values when allocated.
  void ForEachTensor(const std::function<void(at::Tensor&)>& fn);

  at::Tensor& keys() { return keys_; }      // [batch, kv_heads, slots, key_head_dim]
  at::Tensor& values() { return values_; }  // [batch, kv_heads, slots, value_head_dim]
  const at::Tensor& keys() const { return keys_; }
  const at::Tensor& values() const { return values_; }

 private:
  at::Tensor keys_;
  at::Tensor values_;
};

}  // namespace kvserve::cache
