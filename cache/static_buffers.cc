// The buffers of the static layer classes (see static_buffers.h).
#include "cache/static_buffers.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "cache/dynamic_layer.h"

namespace kvserve::cache {
namespace {

std::string ShapeString(const at::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) absl::StrAppend(&s, i ? ", " : "", t.size(i));
  return s + "]";
}

}  // namespace

absl::Status CheckStaticUpdate(const at::Tensor& keys, const at::Tensor& values,
                               const at::Tensor& stored_keys, const at::Tensor& stored_values) {
  if (!keys.defined() || !values.defined() || keys.dim() != 4 || values.dim() != 4) {
    return absl::InvalidArgumentError(
        "cache update needs 4-D keys and values [batch, kv_heads, tokens, head_dim]");
  }
  for (int d = 0; d < 3; ++d) {
    if (keys.size(d) != values.size(d)) {
      return absl::InvalidArgumentError(absl::StrCat("cache update: keys ", ShapeString(keys),
                                                     " and values ", ShapeString(values),
                                                     " differ in batch, heads or tokens"));
    }
  }
  if (!stored_keys.defined()) return absl::OkStatus();
  if (keys.size(0) != stored_keys.size(0) || keys.size(1) != stored_keys.size(1) ||
      keys.size(3) != stored_keys.size(3) || values.size(3) != stored_values.size(3)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cache update: keys ", ShapeString(keys), " / values ", ShapeString(values),
                     " do not match the stored buffers ", ShapeString(stored_keys), " / ",
                     ShapeString(stored_values)));
  }
  if (keys.scalar_type() != stored_keys.scalar_type() ||
      values.scalar_type() != stored_values.scalar_type() ||
      keys.device() != stored_keys.device() || values.device() != stored_values.device()) {
    return absl::InvalidArgumentError("cache update: dtype or device differs from the cache's");
  }
  return absl::OkStatus();
}

int64_t CropTarget(int64_t length, int64_t n) {
  if (n < 0) return std::max<int64_t>(length + n, 0);
  if (n > 0 && n < length) return n;  // legacy absolute target length, as DynamicLayer
  return length;
}

void StaticBuffers::EnsureAllocated(const at::Tensor& keys, const at::Tensor& values,
                                    int64_t slots) {
  if (keys_.defined()) return;
  keys_ = at::zeros({keys.size(0), keys.size(1), slots, keys.size(3)}, keys.options());
  values_ = at::zeros({values.size(0), values.size(1), slots, values.size(3)}, values.options());
}

void StaticBuffers::ZeroSlots(int64_t from, int64_t count) {
  if (!keys_.defined() || count <= 0) return;
  keys_.narrow(2, from, count).zero_();
  values_.narrow(2, from, count).zero_();
}

absl::Status StaticBuffers::SelectRows(const at::Tensor& indices, bool same_size) {
  if (!keys_.defined()) return absl::OkStatus();
  if (absl::Status s = CheckBatchIndices(indices, batch_size(), same_size); !s.ok()) return s;
  const at::Tensor idx = indices.to(keys_.device(), at::kLong);
  keys_ = keys_.index_select(0, idx);
  values_ = values_.index_select(0, idx);
  return absl::OkStatus();
}

absl::Status StaticBuffers::RepeatInterleave(int64_t repeats) {
  if (repeats < 1) return absl::InvalidArgumentError("repeats must be >= 1");
  if (!keys_.defined()) return absl::OkStatus();
  keys_ = keys_.repeat_interleave(repeats, 0);
  values_ = values_.repeat_interleave(repeats, 0);
  return absl::OkStatus();
}

MemoryUsage StaticBuffers::Memory() const {
  if (!keys_.defined()) return {};
  return {.device_bytes = static_cast<int64_t>(keys_.nbytes() + values_.nbytes())};
}

StaticBuffers StaticBuffers::Clone() const {
  StaticBuffers copy;
  if (keys_.defined()) {
    copy.keys_ = keys_.clone(at::MemoryFormat::Contiguous);
    copy.values_ = values_.clone(at::MemoryFormat::Contiguous);
  }
  return copy;
}

void StaticBuffers::Reset() {
  keys_ = at::Tensor();
  values_ = at::Tensor();
}

void StaticBuffers::ForEachTensor(const std::function<void(at::Tensor&)>& fn) {
  if (!keys_.defined()) return;
  fn(keys_);
  fn(values_);
}

}  // namespace kvserve::cache
