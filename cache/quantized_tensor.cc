// Packed affine codes of a K/V tensor (see quantized_tensor.h).
#include "cache/quantized_tensor.h"

namespace kvserve::cache {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

int64_t GroupReduceDim(GroupAxis axis) { return axis == GroupAxis::kPerToken ? 4 : 3; }

at::Tensor GroupView(const at::Tensor& x, GroupAxis axis, int64_t group) {
  const int64_t b = x.size(0), h = x.size(1), s = x.size(2), d = x.size(3);
  if (axis == GroupAxis::kPerToken) return x.reshape({b, h, s, d / group, group});
  if (s == 0) return x.reshape({b, h, 0, group, d});
  const int64_t padded = CeilDiv(s, group) * group;
  at::Tensor xp = x;
  if (padded != s) {
    xp = at::cat({x, x.narrow(2, s - 1, 1).expand({b, h, padded - s, d})}, 2);
  }
  return xp.reshape({b, h, padded / group, group, d});
}

at::Tensor UngroupView(const at::Tensor& grouped, GroupAxis axis, int64_t seq) {
  const int64_t b = grouped.size(0), h = grouped.size(1);
  if (axis == GroupAxis::kPerToken) return grouped.reshape({b, h, seq, -1});
  const int64_t d = grouped.size(4);
  return grouped.reshape({b, h, -1, d}).narrow(2, 0, seq);
}

at::Tensor PackBits(const at::Tensor& codes, int nbits) {
  at::Tensor c = codes.to(at::kLong);
  if (nbits == 8) return c.to(at::kByte);
  const int64_t n = c.size(-1);
  const int64_t padded = CeilDiv(n, 8) * 8;
  if (padded != n) {
    std::vector<int64_t> pad_shape(c.sizes().begin(), c.sizes().end());
    pad_shape.back() = padded - n;
    c = at::cat({c, at::zeros(pad_shape, c.options())}, -1);
  }
  // Eight codes make one word of 8 * nbits <= 32 bits, written as nbits little-endian bytes.
  std::vector<int64_t> word_shape(c.sizes().begin(), c.sizes().end());
  word_shape.back() = padded / 8;
  word_shape.push_back(8);
  const at::Tensor shifts = at::arange(8, c.options()) * nbits;
  at::Tensor words = at::bitwise_left_shift(c.reshape(word_shape), shifts).sum(-1, true);
  const at::Tensor byte_shifts = at::arange(nbits, c.options()) * 8;
  at::Tensor bytes = at::bitwise_right_shift(words, byte_shifts).bitwise_and(0xFF);
  std::vector<int64_t> out_shape(c.sizes().begin(), c.sizes().end());
  out_shape.back() = padded / 8 * nbits;
  return bytes.reshape(out_shape).to(at::kByte);
}

at::Tensor UnpackBits(const at::Tensor& packed, int nbits, int64_t n) {
  if (nbits == 8) return packed;
  const int64_t words = packed.size(-1) / nbits;
  std::vector<int64_t> byte_shape(packed.sizes().begin(), packed.sizes().end());
  byte_shape.back() = words;
  byte_shape.push_back(nbits);
  const at::Tensor p = packed.to(at::kLong).reshape(byte_shape);
  const at::Tensor byte_shifts = at::arange(nbits, p.options()) * 8;
  const at::Tensor word = at::bitwise_left_shift(p, byte_shifts).sum(-1, true);
  const at::Tensor shifts = at::arange(8, p.options()) * nbits;
  at::Tensor codes = at::bitwise_right_shift(word, shifts).bitwise_and((1 << nbits) - 1);
  std::vector<int64_t> out_shape(packed.sizes().begin(), packed.sizes().end());
  out_shape.back() = words * 8;
  return codes.reshape(out_shape).narrow(-1, 0, n).to(at::kByte);
}

QuantizedTensor QuantizedTensor::FromCodes(const at::Tensor& codes, const at::Tensor& scale,
                                           const at::Tensor& zero, int nbits, GroupAxis axis,
                                           int64_t group, at::ScalarType dtype) {
  QuantizedTensor q;
  q.packed_ = PackBits(codes, nbits).contiguous();
  q.scale_ = scale.to(dtype).contiguous();
  q.zero_ = zero.to(dtype).contiguous();
  q.nbits_ = nbits;
  q.axis_ = axis;
  q.group_ = group;
  q.head_dim_ = codes.size(3);
  q.dtype_ = dtype;
  return q;
}

at::Tensor QuantizedTensor::Codes() const { return UnpackBits(packed_, nbits_, head_dim_); }

at::Tensor QuantizedTensor::Dequantize() const {
  const int64_t s = seq_len();
  if (s == 0) {
    return at::empty({packed_.size(0), packed_.size(1), 0, head_dim_},
                     packed_.options().dtype(dtype_));
  }
  const at::Tensor codes = Codes().to(at::kFloat);
  at::Tensor grouped = GroupView(codes, axis_, group_);
  grouped = (grouped - zero_.to(at::kFloat)) * scale_.to(at::kFloat);
  return UngroupView(grouped, axis_, s).to(dtype_);
}

void QuantizedTensor::Truncate(int64_t n) {
  if (!defined() || n >= seq_len()) return;
  packed_ = packed_.narrow(2, 0, n).contiguous();
  const int64_t groups = axis_ == GroupAxis::kPerToken ? n : CeilDiv(n, group_);
  scale_ = scale_.narrow(2, 0, groups).contiguous();
  zero_ = zero_.narrow(2, 0, groups).contiguous();
}

void QuantizedTensor::SelectBatch(const at::Tensor& indices) {
  if (!defined()) return;
  const at::Tensor idx = indices.to(packed_.device(), at::kLong);
  packed_ = packed_.index_select(0, idx);
  scale_ = scale_.index_select(0, idx);
  zero_ = zero_.index_select(0, idx);
}

void QuantizedTensor::RepeatInterleaveBatch(int64_t repeats) {
  if (!defined()) return;
  packed_ = packed_.repeat_interleave(repeats, 0);
  scale_ = scale_.repeat_interleave(repeats, 0);
  zero_ = zero_.repeat_interleave(repeats, 0);
}

QuantizedTensor QuantizedTensor::Clone() const {
  QuantizedTensor q = *this;
  if (defined()) {
    q.packed_ = packed_.clone();
    q.scale_ = scale_.clone();
    q.zero_ = zero_.clone();
  }
  return q;
}

void QuantizedTensor::ForEachTensor(const std::function<void(at::Tensor&)>& fn) {
  if (!defined()) return;
  fn(packed_);
  fn(scale_);
  fn(zero_);
}

int64_t QuantizedTensor::bytes() const {
  if (!defined()) return 0;
  return static_cast<int64_t>(packed_.nbytes() + scale_.nbytes() + zero_.nbytes());
}

}  // namespace kvserve::cache
