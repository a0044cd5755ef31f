// Tiled attention for prefills: softmax(q k^T * scale + mask) v computed block by block with
// an online softmax, so that the [queries x keys] score matrix is never materialised and
// blocks no query of a tile can see (the causal upper triangle, keys outside a sliding window)
// are never computed.
//
// Each task takes one kv head and a tile of consecutive query positions (every query head of
// the kv head's group). For each block of 16 keys it computes the tile's scores against the
// block, updates each row's running maximum and sum, rescales the row's output accumulator and
// adds the block's probability-weighted values. The keys are transposed once per call so that
// a block's scores are 16-lane multiply-adds. Rows of a tile are processed two at a time
// to keep both FMA pipes busy.
//
// The AVX-512 kernel is compiled in a `#pragma GCC target` region and chosen at run time;
// a portable kernel of the same algorithm exists for CPUs without AVX-512 (and for tests);
// see TiledAttentionLevel for which one runs.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "cache/cache_layer.h"
#include "cache/layer_type.h"
#include "model/simd.h"

namespace kvserve::model {

// The kernel TiledAttend uses by default: AVX-512 when the CPU has it (and KVSERVE_CPU_ISA
// does not forbid it), else none (kPortable: callers keep their batched-GEMM attention,
// which is faster than the portable tiled loop).
SimdLevel TiledAttentionLevel();

// Attention of n queries ([n, heads, head_dim] float32, last dimension contiguous) at
// positions q_start.. against a cache view (keys/values [1, kv_heads, kv_len, head_dim]
// float32, last dimension contiguous; with its shared prefix segment, if any, walked first with
// the same online softmax, in place) with the layer's visibility (causal, sliding window,
// chunked; num_valid and kv_offset honoured), as Attend computes it. Writes [n, heads *
// head_dim] into *out. Rows with no visible key are zeros. Returns false, having done
// nothing, when the inputs do not qualify (other dtypes, devices or layouts; head_dim not a
// multiple of 16 up to 128, or 256, for the AVX-512 kernel) or `level` is not kAvx512 or kPortable.
bool TiledAttend(const at::Tensor& queries, const cache::LayerView& kv, int64_t q_start,
                 const cache::LayerSpec& layer, double scale, at::Tensor* out, SimdLevel level);

}  // namespace kvserve::model
