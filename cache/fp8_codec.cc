// float8 e4m3fn conversion (see fp8_codec.h).
#include "cache/fp8_codec.h"

#include <cmath>
#include <cstdint>
#include <limits>

#include "cache/torch_compat.h"

namespace kvserve::cache {
namespace {

// The float value of every e4m3fn bit pattern.
const at::Tensor& DecodeTable() {
  static const at::Tensor table = [] {
    at::Tensor t = at::empty({256}, at::kFloat);
    float* out = t.data_ptr<float>();
    for (int c = 0; c < 256; ++c) {
      const int exponent = (c >> 3) & 15;
      const int mantissa = c & 7;
      float v;
      if (exponent == 15 && mantissa == 7) {
        v = std::numeric_limits<float>::quiet_NaN();
      } else if (exponent == 0) {
        v = std::ldexp(static_cast<float>(mantissa), -9);  // subnormal: m * 2^-9
      } else {
        v = std::ldexp(static_cast<float>(8 + mantissa), exponent - 10);  // (1 + m/8) 2^(e-7)
      }
      out[c] = (c & 0x80) ? -v : v;
    }
    return t;
  }();
  return table;
}

}  // namespace

at::Tensor EncodeE4m3(const at::Tensor& x) {
  const at::Tensor xf = x.to(at::kFloat);
  const at::Tensor a = xf.abs().clamp_max(kE4m3Max);
  // With e = max(floor(log2 a), -6) (-6 is the smallest normal exponent), a * 2^(3-e)
  // rounds to the 3-bit mantissa with its implicit bit (8..16, or 0..8 for subnormals), and
  // (e + 6) * 8 + that is the bit pattern: a mantissa that rounds up to 16 carries into
  // the exponent by itself.
  const at::Tensor e = at::floor(at::log2(a)).clamp_min(-6);
  const at::Tensor m = at::round(a * at::exp2(3 - e));
  at::Tensor code = (e + 6) * 8 + m;
  code = at::where(xf < 0, code + 128, code);
  code = at::where(at::isnan(xf), at::full_like(code, 127), code);
  return code.to(at::kByte);
}

at::Tensor DecodeE4m3(const at::Tensor& codes) {
  const at::Tensor& table = DecodeTable();
  const at::Tensor idx = codes.to(at::kLong).reshape({-1});
  return table.to(codes.device()).index_select(0, idx.to(codes.device())).view(codes.sizes());
}

at::Tensor ToFp8Storage(const at::Tensor& x) {
#if KVSERVE_TORCH_AT_LEAST(2, 1)
  // The native cast does not saturate (out-of-range values become NaN), so clamp first.
  // Stored as the uint8 bit patterns: not every op (index_select, repeat_interleave) takes
  // float8 tensors in every 2.x release.
  return x.to(at::kFloat)
      .clamp(-kE4m3Max, kE4m3Max)
      .to(c10::ScalarType::Float8_e4m3fn)
      .view(at::kByte);
#else
  return EncodeE4m3(x);
#endif
}

at::Tensor FromFp8Storage(const at::Tensor& stored) {
#if KVSERVE_TORCH_AT_LEAST(2, 1)
  return stored.view(c10::ScalarType::Float8_e4m3fn).to(at::kFloat);
#else
  return DecodeE4m3(stored);
#endif
}

}  // namespace kvserve::cache
