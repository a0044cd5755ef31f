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
  buffer_.Append(keys, values);
  return LayerView{buffer_.keys(), buffer_.values(), 0, buffer_.size()};
}

at::Tensor DynamicLayer::keys() const { return buffer_.defined() ? buffer_.keys() : at::Tensor(); }

at::Tensor DynamicLayer::values() const {
  return buffer_.defined() ? buffer_.values() : at::Tensor();
}

absl::Status DynamicLayer::Crop(int64_t n) {
  const int64_t length = buffer_.size();
  if (n < 0) {
    buffer_.Truncate(length + n > 0 ? length + n : 0);
  } else if (n > 0 && n < length) {
    buffer_.Truncate(n);  // legacy absolute target length
  }
  return absl::OkStatus();
}

absl::Status DynamicLayer::Reorder(const at::Tensor& beam_idx) {
  if (!buffer_.defined()) return absl::OkStatus();
  if (absl::Status s = CheckBatchIndices(beam_idx, BatchSize(), true); !s.ok()) return s;
  buffer_.SelectBatch(beam_idx);
  return absl::OkStatus();
}

absl::Status DynamicLayer::SelectIndices(const at::Tensor& indices) {
  if (!buffer_.defined()) return absl::OkStatus();
  if (absl::Status s = CheckBatchIndices(indices, BatchSize(), false); !s.ok()) return s;
  buffer_.SelectBatch(indices);
  return absl::OkStatus();
}

absl::Status DynamicLayer::RepeatInterleave(int64_t repeats) {
  if (repeats < 1) return absl::InvalidArgumentError("repeats must be >= 1");
  buffer_.RepeatInterleaveBatch(repeats);
  return absl::OkStatus();
}

std::unique_ptr<CacheLayer> DynamicLayer::Clone() const {
  auto copy = std::make_unique<DynamicLayer>();
  copy->buffer_ = buffer_.CloneCompact();
  return copy;
}

}  // namespace kvserve::cache
