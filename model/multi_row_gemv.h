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

// How float32 activations meet bfloat16 weights in a projection on the CPU.
enum class Bf16Compute {
  // The weight is widened to float32 (exactly): results as with a float32 copy of the
  // checkpoint.
  kExact,
  // The activations are rounded to bfloat16 (to nearest, ties to even) and multiplied by
  // AVX512-BF16's dot-product instructions, pairs of products summed into float32
  // accumulators, as Transformers (a bfloat16 model's matmuls) and llama.cpp compute with
  // bfloat16 weights. About twice the arithmetic rate and half the activation traffic; a
  // product's relative error grows from float32's 2^-24 to bfloat16's 2^-9 per input.
  // Only where CpuHasAvx512Bf16(); elsewhere it falls back to kExact.
  kNative,
};

// The mode a Bf16Compute request resolves to here: kNative only where the CPU has
// AVX512-BF16 (within the KVSERVE_CPU_ISA cap).
Bf16Compute ResolveBf16Compute(Bf16Compute wanted);

// dst[i] = x[i] rounded to bfloat16 (nearest, ties to even; NaN stays NaN), i < n. Subnormal
// inputs (below 2^-126 in magnitude) become zero of their sign, as AVX512-BF16's conversion
// instruction does whatever the floating-point mode.
void RoundToBf16(const float* x, uint16_t* dst, int64_t n);

// Rows of x this kernel takes at most.
inline constexpr int64_t kMultiRowGemvMaxRows = 16;

// True for the weight dtypes MultiRowGemv and WidenWeight take: float32, bfloat16, float16.
bool IsGemvWeightDtype(at::ScalarType dtype);

// x: [rows, in] float32, w: [out, in] float32 / bfloat16 / float16, both contiguous and on
// the CPU, 1 <= rows <= kMultiRowGemvMaxRows. Returns [rows, out] float32, each row computed
// in the same order whatever the other rows, so a sequence's result does not depend on what
// it is batched with. Splits the output features over ParallelFor's threads. Throws
// c10::Error when the inputs do not meet these conditions. With a bfloat16 w and `bf16`
// resolving to kNative, x is rounded to bfloat16 first (Bf16Compute::kNative).
at::Tensor MultiRowGemv(const at::Tensor& x, const at::Tensor& w,
                        Bf16Compute bf16 = Bf16Compute::kExact);

// The float32 copy of a CPU weight of one of those dtypes, written into `*scratch` (grown as
// needed and reused across calls, so that a prefill does not allocate a weight-sized buffer
// per projection); returns a [out, in] view of it. bfloat16 and float16 widen exactly.
at::Tensor WidenWeight(const at::Tensor& w, at::Tensor* scratch);

}  // namespace kvserve::model
