// Fused float32 CPU kernels for a decode step's small element-wise work.
//
// A decode step's matrices are small, so each ATen operator's fixed cost (dispatch, output
// allocation) outweighs its arithmetic: rotating q and k took eight operators per layer,
// attention a dozen. These loops do the same arithmetic in one pass each. Every function
// returns false, having done nothing, when its inputs are not float32 CPU tensors of the
// layout it takes; callers then run the ATen expression. The same inputs give the same
// results whatever else is in the batch.
#pragma once

#include <ATen/ATen.h>

#include "cache/cache_layer.h"
#include "cache/layer_type.h"

namespace kvserve::model {

// A defined float32 tensor on the CPU: what the kernels below take.
bool IsCpuFloat(const at::Tensor& t);

// The dot product of n floats, and y += alpha * x over n floats, that the fused kernels use
// (AVX2 where the CPU has it): for other kernels' inner loops.
using DotFn = float (*)(const float*, const float*, int64_t);
using AxpyFn = void (*)(float*, float, const float*, int64_t);
DotFn FloatDot();
AxpyFn FloatAxpy();

// x: [tokens, heads, head_dim] (any strides, last dimension contiguous); cos, sin:
// [tokens, rot_dim] contiguous. Rotates the first rot_dim features of every head in place:
// x = x * cos + rotate_half(x) * sin, rotate_half(a, b) = (-b, a).
bool FusedRotateHalf(at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, int64_t rot_dim);

// gate_up: [rows, 2 * inter] contiguous. Returns silu(gate) * up as [rows, inter], or an
// undefined tensor when the input does not qualify. A few rows take one fused loop; many
// (a prefill) run ATen's vectorized kernels on row slices over ParallelFor's threads.
at::Tensor FusedSiluMul(const at::Tensor& gate_up, int64_t inter);

// softmax over the last dimension of a float32 CPU tensor, computed on slices of its leading
// rows over ParallelFor's threads (LibTorch's own pool is kept at one thread, see
// compat::SetNumThreads). Undefined when the input does not qualify.
at::Tensor ParallelSoftmax(const at::Tensor& scores);

// Whether queries ([n, heads, head_dim]) and a cache view qualify for the float32 CPU attention
// kernels (FusedAttend, TiledAttend): float32 CPU tensors with contiguous last dimensions, a
// one-row view whose keys and values have one shape and the queries' head_dim, and query
// heads a multiple of the kv heads.
bool IsFloatAttentionInput(const at::Tensor& queries, const cache::LayerView& kv);

// Attention of n queries ([n, heads, head_dim], last dimension contiguous) at positions
// q_start.. against a cache view (keys/values [1, kv_heads, kv_len, head_dim], last
// dimension contiguous), with the layer's mask computed inline. Writes [n, heads *
// head_dim] into *out (allocated here). Rows with no visible key are zeros, as in Attend.
// softcap > 0 caps every scaled score s to softcap * tanh(s / softcap) (Gemma 2).
bool FusedAttend(const at::Tensor& queries, const cache::LayerView& kv, int64_t q_start,
                 const cache::LayerSpec& layer, double scale, at::Tensor* out, double softcap = 0);

}  // namespace kvserve::model
