// MultiRowGemv: y = x w^T for a few rows of x (a decode step) against a large weight,
// reading the weight from memory once for all rows. OpenBLAS's GEMM repacks the weight,
// which costs several times a plain read when there are only a few rows; its GEMV handles
// one row only, in float32 only.
//
// The weight may be stored in float32, bfloat16 or float16 while x and y stay float32:
// each weight element is widened in registers, so a 16-bit weight costs half the memory
// traffic, which is what bounds a decode step on the CPU.
#pragma once

#include <ATen/ATen.h>

namespace kvserve::model {

// Rows of x this kernel takes at most.
inline constexpr int64_t kMultiRowGemvMaxRows = 16;

// True for the weight dtypes MultiRowGemv and WidenWeight take: float32, bfloat16, float16.
bool IsGemvWeightDtype(at::ScalarType dtype);

// x: [rows, in] float32, w: [out, in] float32 / bfloat16 / float16, both contiguous and on
// the CPU, 1 <= rows <= kMultiRowGemvMaxRows. Returns [rows, out] float32, each row computed
// in the same order whatever the other rows, so a sequence's result does not depend on what
// it is batched with. Splits the output features over ParallelFor's threads. Throws
// c10::Error when the inputs do not meet these conditions.
at::Tensor MultiRowGemv(const at::Tensor& x, const at::Tensor& w);

// The float32 copy of a CPU weight of one of those dtypes, written into `*scratch` (grown as
// needed and reused across calls, so that a prefill does not allocate a weight-sized buffer
// per projection); returns a [out, in] view of it. bfloat16 and float16 widen exactly.
at::Tensor WidenWeight(const at::Tensor& w, at::Tensor* scratch);

}  // namespace kvserve::model
