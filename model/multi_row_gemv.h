// MultiRowGemv: y = x w^T for a few rows of x against a large float32 weight, reading the
// weight from memory once for all rows (OpenBLAS's GEMM repacks it, which costs several
// times a plain read when there are only a few rows).
#pragma once

#include <ATen/ATen.h>

namespace kvserve::model {

// Rows of x this kernel takes at most.
inline constexpr int64_t kMultiRowGemvMaxRows = 16;

// x: [rows, in], w: [out, in], both float32, contiguous, on the CPU, 1 <= rows <=
// kMultiRowGemvMaxRows. Returns [rows, out] float32. Splits the output features over
// `num_threads` threads (the calling thread included). Throws c10::Error when the inputs do
// not meet these conditions.
at::Tensor MultiRowGemv(const at::Tensor& x, const at::Tensor& w, int num_threads);

}  // namespace kvserve::model
