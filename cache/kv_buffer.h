// KvBuffer: growable K/V storage with a live window, shared by the dynamic layer classes.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>

#include "absl/status/status.h"

namespace kvserve::cache {

// A pair of tensors [batch, heads, capacity, head_dim] whose columns [begin, end) hold live
// tokens. Appending writes in place and grows the capacity in steps (never per token), so a
// decode step allocates nothing; dropping tokens from the front only moves `begin`, and the
// live window is moved back to column 0 when the free tail runs out.
class KvBuffer {
 public:
  // Capacity grows in multiples of this many tokens.
  static constexpr int64_t kGranuleTokens = 64;

  bool defined() const { return keys_.defined(); }
  int64_t size() const { return end_ - begin_; }
  int64_t capacity() const { return defined() ? keys_.size(2) : 0; }
  int64_t batch_size() const { return defined() ? keys_.size(0) : 0; }

  // OK when `keys`/`values` ([batch, heads, n, head_dim]) can be appended: 4-D, equal shapes,
  // and batch/heads/head_dim/dtype/device equal to what is stored. InvalidArgument otherwise.
  absl::Status CheckAppend(const at::Tensor& keys, const at::Tensor& values) const;
  // Appends after CheckAppend succeeded. `min_capacity` asks for at least that many columns
  // when storage must be (re)allocated, so that callers that drop old tokens compact rarely.
  void Append(const at::Tensor& keys, const at::Tensor& values, int64_t min_capacity = 0);

  // Live keys/values: views [batch, heads, size, head_dim] into the storage.
  at::Tensor keys() const;
  at::Tensor values() const;
  // Views of `count` live tokens starting `start` tokens into the live window.
  at::Tensor keys(int64_t start, int64_t count) const;
  at::Tensor values(int64_t start, int64_t count) const;

  // Forgets the first `n` live tokens (n <= size()).
  void DropFront(int64_t n);
  // Keeps only the first `n` live tokens (n <= size()).
  void Truncate(int64_t n);
  // Frees the storage.
  void Reset();

  // Applies index_select on the batch dimension (beam reorder / batch selection).
  void SelectBatch(const at::Tensor& indices);
  // Repeats each batch row `repeats` times, adjacent.
  void RepeatInterleaveBatch(int64_t repeats);

  // Calls `fn` on the defined storage tensors, which it may replace by same-shaped copies
  // (offloading moves them between device and host).
  void ForEachTensor(const std::function<void(at::Tensor&)>& fn);

  // Bytes of storage held (the whole capacity of both tensors).
  int64_t bytes() const;
  // A deep copy whose capacity is exactly the live size (a compact snapshot).
  KvBuffer CloneCompact() const;

 private:
  void Reallocate(int64_t new_capacity);

  at::Tensor keys_;    // [batch, heads, capacity, head_dim]
  at::Tensor values_;  // [batch, heads, capacity, head_dim]
  int64_t begin_ = 0;
  int64_t end_ = 0;
};

}  // namespace kvserve::cache
