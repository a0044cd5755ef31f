// QuantizedTensor: bit-packed affine codes of a K/V tensor with per-group scales and zeros.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>

namespace kvserve::cache {

// How values are grouped to share one scale and zero-point. A group never spans batch rows
// or heads, so beam reorders and crops act on the codes exactly (no re-quantization).
enum class GroupAxis {
  kPerToken,    // `group` consecutive channels of one token (KIVI's value quantization)
  kPerChannel,  // `group` consecutive tokens of one channel (KIVI's key quantization)
};

// A [batch, heads, seq, head_dim] tensor quantized to `nbits` (1..8) unsigned codes q with
// value = (q - zero) * scale per group. Codes are packed per token row: each run of 8 codes
// takes `nbits` bytes, so a row takes ceil(head_dim / 8) * nbits bytes and int4 really costs
// 4 bits per value; scales and zeros are kept in the input dtype.
class QuantizedTensor {
 public:
  QuantizedTensor() = default;

  // Builds from codes [batch, heads, seq, head_dim] (integers in [0, 2^nbits - 1], any
  // dtype) and the scale/zero of each group, shaped as GroupedShape() with the reduced
  // dimension of size 1. `dtype` is the dtype Dequantize() returns.
  static QuantizedTensor FromCodes(const at::Tensor& codes, const at::Tensor& scale,
                                   const at::Tensor& zero, int nbits, GroupAxis axis, int64_t group,
                                   at::ScalarType dtype);

  bool defined() const { return packed_.defined(); }
  int64_t seq_len() const { return defined() ? packed_.size(2) : 0; }
  int64_t batch_size() const { return defined() ? packed_.size(0) : 0; }
  int nbits() const { return nbits_; }

  // The values, [batch, heads, seq, head_dim] in the original dtype.
  at::Tensor Dequantize() const;
  // Unpacked codes [batch, heads, seq, head_dim] (uint8).
  at::Tensor Codes() const;

  // Keeps the first `n` tokens (n <= seq_len()). Exact: a per-channel group cut short keeps
  // its scale and zero, which still dequantize its remaining tokens to the same values.
  void Truncate(int64_t n);
  void SelectBatch(const at::Tensor& indices);  // int64 row indices
  void RepeatInterleaveBatch(int64_t repeats);
  QuantizedTensor Clone() const;
  void ForEachTensor(const std::function<void(at::Tensor&)>& fn);

  // Bytes held: packed codes + scales + zeros.
  int64_t bytes() const;
  int64_t packed_bytes() const { return defined() ? static_cast<int64_t>(packed_.nbytes()) : 0; }

 private:
  at::Tensor packed_;  // uint8 [batch, heads, seq, ceil(head_dim / 8) * nbits]
  at::Tensor scale_;   // per token: [B, H, seq, head_dim/group, 1]; per channel: [B, H,
                       // ceil(seq/group), 1, head_dim]
  at::Tensor zero_;    // as scale_
  int nbits_ = 0;
  GroupAxis axis_ = GroupAxis::kPerToken;
  int64_t group_ = 0;
  int64_t head_dim_ = 0;
  at::ScalarType dtype_ = at::kFloat;
};

// Views x [batch, heads, seq, head_dim] as groups: per token [B, H, seq, head_dim/group,
// group] (reduce dim 4), per channel [B, H, ceil(seq/group), group, head_dim] (reduce dim
// 3; a short last group is padded with copies of the last token, which changes no min/max).
// Per token needs head_dim % group == 0.
at::Tensor GroupView(const at::Tensor& x, GroupAxis axis, int64_t group);
int64_t GroupReduceDim(GroupAxis axis);
// Inverse of GroupView: back to [B, H, seq, head_dim], dropping padding.
at::Tensor UngroupView(const at::Tensor& grouped, GroupAxis axis, int64_t seq);

// Packs codes [..., n] (values < 2^nbits, nbits in 1..8) into uint8 [..., ceil(n/8)*nbits].
at::Tensor PackBits(const at::Tensor& codes, int nbits);
// Inverse of PackBits: uint8 [..., n].
at::Tensor UnpackBits(const at::Tensor& packed, int nbits, int64_t n);

}  // namespace kvserve::cache
