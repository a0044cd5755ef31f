// Prefill projections through oneDNN's matmul (its AVX-512 "brgemm" kernels where the CPU has
// them), used instead of OpenBLAS's GEMM when kvserve is built with oneDNN (Debian's
// libdnnl-dev) and the CPU has AVX-512. Measured on this project's AVX-512 machine
// (bench/RESULTS-model.md): 7-12 % faster than OpenBLAS 0.3.21 on one thread and 13-35 % on
// two for the bench presets' shapes.
//
// A primitive is made (JIT-compiled) once per (rows, in, out) shape and kept. Rows are split
// into a multiple of 64 and a remainder, so that prompts of any length make a bounded number
// of shapes (at most 64 remainders and max_rows / 64 bodies per weight shape). Its threads are
// OpenMP's, set to compat::NumThreads() on the calling thread for the call only.
#pragma once

#include <ATen/core/Tensor.h>

namespace kvserve::model {

// Whether OnednnLinear can run here: built with oneDNN, an AVX-512 CPU (within the
// KVSERVE_CPU_ISA cap), and KVSERVE_PREFILL_GEMM not set to "openblas".
bool OnednnAvailable();

// y = x w^T for x [rows, in] float32 (rows contiguous) and w [out, in] contiguous, into a new
// [rows, out] float32 tensor. w is float32, or bfloat16 where Bf16Compute::kNative resolves
// (AVX512-BF16): x is then rounded to bfloat16 and oneDNN's bf16 kernels multiply, summing in
// float32 (about twice the f32 rate; no widened copy of the weight). False, doing nothing,
// when unavailable or the inputs do not qualify.
bool OnednnLinear(const at::Tensor& x, const at::Tensor& w, at::Tensor* y);

}  // namespace kvserve::model
