// The growing full-attention cache layer (see dynamic_layer.h).
#include "cache/dynamic_layer.h"

#include "absl/strings/str_cat.h"

namespace kvserve::cache {

absl::Status CheckBatchIndices(const at::Tensor& indices, int64_t batch_size, bool same_size) {
  if (!indices.defined() || indices.dim() != 1) {
    return absl::InvalidArgumentError("batch indices must be a 1-D integer tensor");
  }
  if (at::isFloatingType(indices.scalar_type())) {
    return absl::InvalidArgumentError("batch indices must be integers");
  }
  if (same_size && indices.size(0) != batch_size) {
    return absl::InvalidArgumentError(absl::StrCat("beam_idx has ", indices.size(0),
                                                   " entries but the cache batch is ", batch_size));
  }
  if (indices.numel() > 0 && batch_size > 0) {
    const at::Tensor cpu = indices.to(at::kCPU, at::kLong);
    const int64_t lo = cpu.min().item<int64_t>();
    const int64_t hi = cpu.max().item<int64_t>();
    if (lo < 0 || hi >= batch_size) {
      return absl::OutOfRangeError(
          absl::StrCat("batch index out of range [0, ", batch_size, "): got ", lo < 0 ? lo : hi));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<LayerView> DynamicLayer::Update(const at::Tensor& keys, const at::Tensor& values) {
  if (absl::Status s = buffer_.CheckAppend(keys, values); !s.ok()) return s;
  if (prefix_keys_.defined()) {
    absl::Status s = CheckContinuesSegment(keys, prefix_keys_, prefix_rows_, buffer_.defined());
    if (!s.ok()) return s;
  }
  buffer_.Append(keys, values);
  return LayerView{buffer_.keys(), buffer_.values(), 0,
                   buffer_.size(), prefix_keys_,     prefix_values_};
}

absl::Status CheckSharedSegment(const at::Tensor& keys, const at::Tensor& values) {
  if (!keys.defined() || !values.defined() || keys.dim() != 4 || keys.size(0) != 1 ||
      !keys.sizes().equals(values.sizes()) || keys.size(2) < 1) {
    return absl::InvalidArgumentError(
        "a shared prefix segment is [1, kv_heads, n >= 1, head_dim] keys and values of one shape");
  }
  return absl::OkStatus();
}

absl::Status CheckContinuesSegment(const at::Tensor& keys, const at::Tensor& prefix_keys,
                                   int64_t prefix_rows, bool tail_started) {
  // The tail's first update fixes its rows; every update keeps the segment's heads, head_dim,
  // dtype and device.
  const bool rows_ok = tail_started || keys.size(0) == prefix_rows;
  if (!rows_ok || keys.size(1) != prefix_keys.size(1) || keys.size(3) != prefix_keys.size(3) ||
      keys.scalar_type() != prefix_keys.scalar_type() || keys.device() != prefix_keys.device()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cache update: keys do not continue the shared prefix segment (rows ",
                     prefix_rows, ", kv_heads ", prefix_keys.size(1), ", head_dim ",
                     prefix_keys.size(3), ", same dtype and device)"));
  }
  return absl::OkStatus();
}

absl::Status DynamicLayer::AttachSharedPrefix(const at::Tensor& keys, const at::Tensor& values) {
  if (SeqLength() != 0) {
    return absl::FailedPreconditionError("a shared prefix attaches only to an empty layer");
  }
  if (absl::Status s = CheckSharedSegment(keys, values); !s.ok()) return s;
  prefix_keys_ = keys;
  prefix_values_ = values;
  prefix_rows_ = 1;
  return absl::OkStatus();
}

void DynamicLayer::Reset() {
  buffer_.Reset();
  prefix_keys_ = at::Tensor();
  prefix_values_ = at::Tensor();
  prefix_rows_ = 1;
}

at::Tensor DynamicLayer::keys() const {
  if (prefix_keys_.defined()) {
    const at::Tensor shared = prefix_keys_.expand({BatchSize(), -1, -1, -1});
    return buffer_.defined() ? at::cat({shared, buffer_.keys()}, 2) : shared.clone();
  }
  return buffer_.defined() ? buffer_.keys() : at::Tensor();
}

at::Tensor DynamicLayer::values() const {
  if (prefix_values_.defined()) {
    const at::Tensor shared = prefix_values_.expand({BatchSize(), -1, -1, -1});
    return buffer_.defined() ? at::cat({shared, buffer_.values()}, 2) : shared.clone();
  }
  return buffer_.defined() ? buffer_.values() : at::Tensor();
}

void DynamicLayer::MaterializePrefix(int64_t keep) {
  const int64_t rows = BatchSize();
  KvBuffer own;
  if (keep > 0) {
    own.Append(prefix_keys_.narrow(2, 0, keep).expand({rows, -1, -1, -1}),
               prefix_values_.narrow(2, 0, keep).expand({rows, -1, -1, -1}));
  }
  buffer_ = std::move(own);
  prefix_keys_ = at::Tensor();
  prefix_values_ = at::Tensor();
  prefix_rows_ = 1;
}

absl::Status DynamicLayer::Crop(int64_t n) {
  const int64_t length = SeqLength();
  int64_t target = length;
  if (n < 0) {
    target = length + n > 0 ? length + n : 0;
  } else if (n > 0 && n < length) {
    target = n;  // legacy absolute target length
  }
  if (target == length) return absl::OkStatus();
  const int64_t shared = SharedPrefixLength();
  if (target < shared) {
    // Copy on write: the segment is never cut in place; what stays of it becomes the tail.
    MaterializePrefix(target);
    return absl::OkStatus();
  }
  buffer_.Truncate(target - shared);
  return absl::OkStatus();
}

absl::Status DynamicLayer::Reorder(const at::Tensor& beam_idx) {
  // Every row reads the same shared segment: only the tails move.
  if (!buffer_.defined()) return absl::OkStatus();
  if (absl::Status s = CheckBatchIndices(beam_idx, BatchSize(), true); !s.ok()) return s;
  buffer_.SelectBatch(beam_idx);
  return absl::OkStatus();
}

absl::Status DynamicLayer::SelectIndices(const at::Tensor& indices) {
  if (!buffer_.defined() && !prefix_keys_.defined()) return absl::OkStatus();
  if (absl::Status s = CheckBatchIndices(indices, BatchSize(), false); !s.ok()) return s;
  if (!buffer_.defined()) {
    prefix_rows_ = indices.size(0);
    return absl::OkStatus();
  }
  buffer_.SelectBatch(indices);
  return absl::OkStatus();
}

absl::Status DynamicLayer::RepeatInterleave(int64_t repeats) {
  if (repeats < 1) return absl::InvalidArgumentError("repeats must be >= 1");
  if (!buffer_.defined() && prefix_keys_.defined()) prefix_rows_ *= repeats;
  buffer_.RepeatInterleaveBatch(repeats);
  return absl::OkStatus();
}

std::unique_ptr<CacheLayer> DynamicLayer::Clone() const {
  auto copy = std::make_unique<DynamicLayer>();
  copy->buffer_ = buffer_.CloneCompact();
  copy->prefix_keys_ = prefix_keys_;
  copy->prefix_values_ = prefix_values_;
  copy->prefix_rows_ = prefix_rows_;
  return copy;
}

}  // namespace kvserve::cache
