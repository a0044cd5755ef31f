// Growable K/V storage (see kv_buffer.h).
#include "cache/kv_buffer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace kvserve::cache {
namespace {

int64_t RoundUp(int64_t n, int64_t granule) { return (n + granule - 1) / granule * granule; }

std::string ShapeString(const at::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) absl::StrAppend(&s, i ? ", " : "", t.size(i));
  return s + "]";
}

}  // namespace

absl::Status KvBuffer::CheckAppend(const at::Tensor& keys, const at::Tensor& values) const {
  if (!keys.defined() || !values.defined() || keys.dim() != 4 || values.dim() != 4) {
    return absl::InvalidArgumentError(
        "cache update needs 4-D keys and values [batch, kv_heads, tokens, head_dim]");
  }
  if (!keys.sizes().equals(values.sizes())) {
    return absl::InvalidArgumentError(absl::StrCat("cache update: keys ", ShapeString(keys),
                                                   " and values ", ShapeString(values),
                                                   " differ in shape"));
  }
  if (!defined()) return absl::OkStatus();
  if (keys.size(0) != keys_.size(0) || keys.size(1) != keys_.size(1) ||
      keys.size(3) != keys_.size(3)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cache update: keys ", ShapeString(keys),
        " do not match the stored batch, kv_heads and head_dim of ", ShapeString(keys_)));
  }
  if (keys.scalar_type() != keys_.scalar_type() || keys.device() != keys_.device()) {
    return absl::InvalidArgumentError("cache update: dtype or device differs from the cache's");
  }
  return absl::OkStatus();
}

void KvBuffer::Append(const at::Tensor& keys, const at::Tensor& values, int64_t min_capacity) {
  const int64_t n = keys.size(2);
  if (!defined()) {
    keys_ = at::empty({keys.size(0), keys.size(1), 0, keys.size(3)}, keys.options());
    values_ = at::empty({values.size(0), values.size(1), 0, values.size(3)}, values.options());
  }
  if (end_ + n > capacity()) {
    const int64_t live = size();
    if (begin_ > 0 && live + n <= capacity()) {
      // Enough room once the live window moves to the front. Overlapping source and
      // destination go through a temporary copy.
      const bool overlap = live > begin_;
      at::Tensor k = keys_.narrow(2, begin_, live);
      at::Tensor v = values_.narrow(2, begin_, live);
      keys_.narrow(2, 0, live).copy_(overlap ? k.clone() : k);
      values_.narrow(2, 0, live).copy_(overlap ? v.clone() : v);
      begin_ = 0;
      end_ = live;
    } else {
      const int64_t grown = std::max({live + n, capacity() + capacity() / 4, min_capacity});
      Reallocate(RoundUp(grown, kGranuleTokens));
    }
  }
  keys_.narrow(2, end_, n).copy_(keys);
  values_.narrow(2, end_, n).copy_(values);
  end_ += n;
}

void KvBuffer::Reallocate(int64_t new_capacity) {
  const int64_t live = size();
  at::Tensor k =
      at::empty({keys_.size(0), keys_.size(1), new_capacity, keys_.size(3)}, keys_.options());
  at::Tensor v = at::empty({values_.size(0), values_.size(1), new_capacity, values_.size(3)},
                           values_.options());
  if (live > 0) {
    k.narrow(2, 0, live).copy_(keys_.narrow(2, begin_, live));
    v.narrow(2, 0, live).copy_(values_.narrow(2, begin_, live));
  }
  keys_ = std::move(k);
  values_ = std::move(v);
  begin_ = 0;
  end_ = live;
}

at::Tensor KvBuffer::keys() const { return keys(0, size()); }
at::Tensor KvBuffer::values() const { return values(0, size()); }
at::Tensor KvBuffer::keys(int64_t start, int64_t count) const {
  return keys_.narrow(2, begin_ + start, count);
}
at::Tensor KvBuffer::values(int64_t start, int64_t count) const {
  return values_.narrow(2, begin_ + start, count);
}

void KvBuffer::DropFront(int64_t n) {
  begin_ += std::min(n, size());
  if (begin_ == end_) begin_ = end_ = 0;
}

void KvBuffer::Truncate(int64_t n) {
  end_ = begin_ + std::min(n, size());
  if (begin_ == end_) begin_ = end_ = 0;
}

void KvBuffer::Reset() {
  keys_ = at::Tensor();
  values_ = at::Tensor();
  begin_ = end_ = 0;
}

void KvBuffer::SelectBatch(const at::Tensor& indices) {
  if (!defined()) return;
  const at::Tensor idx = indices.to(keys_.device(), at::kLong);
  keys_ = keys_.index_select(0, idx);
  values_ = values_.index_select(0, idx);
}

void KvBuffer::RepeatInterleaveBatch(int64_t repeats) {
  if (!defined()) return;
  keys_ = keys_.repeat_interleave(repeats, 0);
  values_ = values_.repeat_interleave(repeats, 0);
}

void KvBuffer::ForEachTensor(const std::function<void(at::Tensor&)>& fn) {
  if (!defined()) return;
  fn(keys_);
  fn(values_);
}

int64_t KvBuffer::bytes() const {
  if (!defined()) return 0;
  return static_cast<int64_t>(keys_.nbytes() + values_.nbytes());
}

KvBuffer KvBuffer::CloneCompact() const {
  KvBuffer copy;
  if (!defined()) return copy;
  copy.keys_ = keys().clone(at::MemoryFormat::Contiguous);
  copy.values_ = values().clone(at::MemoryFormat::Contiguous);
  copy.begin_ = 0;
  copy.end_ = size();
  return copy;
}

}  // namespace kvserve::cache
