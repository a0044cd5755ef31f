// float8 e4m3fn encode/decode: native from LibTorch 2.1, kvserve's own before.
#pragma once

#include <ATen/ATen.h>

namespace kvserve::cache {

// Largest finite e4m3fn value.
inline constexpr double kE4m3Max = 448.0;

// Encodes x (any floating dtype) to e4m3fn bit patterns (uint8): round to nearest even,
// saturating at +-448 (e4m3fn has no infinity), NaN to 0x7F. Always available, so it is
// tested on every LibTorch.
at::Tensor EncodeE4m3(const at::Tensor& x);
// Decodes e4m3fn bit patterns (uint8) to float32.
at::Tensor DecodeE4m3(const at::Tensor& codes);

// e4m3fn bit patterns (uint8, one byte per value) of x: converted by the native
// at::kFloat8_e4m3fn cast from LibTorch 2.1 (after saturating), by EncodeE4m3 before.
at::Tensor ToFp8Storage(const at::Tensor& x);
// float32 values of ToFp8Storage's result.
at::Tensor FromFp8Storage(const at::Tensor& stored);

}  // namespace kvserve::cache
