// Tiled attention with an online softmax (see tiled_attention.h).
#include "model/tiled_attention.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "model/cpu_kernels.h"
#include "model/worker_pool.h"

namespace kvserve::model {
namespace {

// Keys per block: one 16-lane vector of scores per query row.
constexpr int64_t kKeyBlock = 16;
// Query positions per task (each with every query head of its kv head's group).
constexpr int64_t kQueryTile = 16;
// The AVX-512 kernel keeps two rows' outputs in registers: head_dim / 16 vectors each.
constexpr int64_t kMaxVectorsPerRow = 16;

// The keys (indices into the view) a query at q_pos sees: [lo, hi], empty when lo > hi. The
// visible keys of every layer type form one interval (see Visible in cpu_kernels.cc).
struct KeyRange {
  int64_t lo = 0;
  int64_t hi = -1;
  bool empty() const { return lo > hi; }
};

// `kv_len` and `num_valid` count the view's shared prefix columns too.
KeyRange VisibleKeys(int64_t q_pos, const cache::LayerView& kv, const cache::LayerSpec& layer,
                     int64_t kv_len, int64_t num_valid) {
  KeyRange range;
  range.hi = std::min({num_valid, kv_len, q_pos - kv.kv_offset + 1}) - 1;
  switch (layer.type) {
    case cache::LayerType::kFullAttention:
      break;
    case cache::LayerType::kSlidingAttention:
      range.lo = std::max<int64_t>(0, q_pos - layer.window + 1 - kv.kv_offset);
      break;
    case cache::LayerType::kChunkedAttention:
      range.lo = std::max<int64_t>(0, (q_pos / layer.window) * layer.window - kv.kv_offset);
      break;
    case cache::LayerType::kMambaState:  // no attention (the Mamba forward never calls this)
      break;
  }
  return range;
}

// One row of a tile: a query vector, where its output goes, and the keys it sees.
struct Row {
  const float* q = nullptr;
  float* out = nullptr;
  KeyRange keys;
};

// What every task of one call shares.
struct Problem {
  int64_t d = 0;  // head_dim
  float scale = 1.0f;
  const float* kt = nullptr;  // keys transposed: [kv_heads][d][lp]
  int64_t lp = 0;             // keys per transposed row (a multiple of kKeyBlock)
  const float* values = nullptr;
  int64_t vs1 = 0, vs2 = 0;  // values' strides (kv head, key)
  // The view's shared prefix segment, whose columns come before `values`' (0: none).
  int64_t prefix_len = 0;
  const float* prefix_values = nullptr;
  int64_t pvs1 = 0, pvs2 = 0;
};

// Key column j's value vector for kv head kh, from the prefix segment or the own columns.
inline const float* ValueRow(const Problem& p, int64_t kh, int64_t j) {
  return j < p.prefix_len ? p.prefix_values + kh * p.pvs1 + j * p.pvs2
                          : p.values + kh * p.vs1 + (j - p.prefix_len) * p.vs2;
}

// The portable kernel: the same blocks and online softmax, one row at a time.
void RowsPortable(const Problem& p, int64_t kh, const Row* rows, int64_t num_rows) {
  const int64_t d = p.d;
  const float* kt = p.kt + kh * d * p.lp;
  std::vector<float> acc(static_cast<size_t>(d));
  float scores[kKeyBlock];
  for (int64_t r = 0; r < num_rows; ++r) {
    const Row& row = rows[r];
    std::fill(acc.begin(), acc.end(), 0.0f);
    float max = -std::numeric_limits<float>::infinity();
    float sum = 0.0f;
    if (!row.keys.empty()) {
      for (int64_t j0 = row.keys.lo / kKeyBlock * kKeyBlock; j0 <= row.keys.hi; j0 += kKeyBlock) {
        const int64_t first = std::max(row.keys.lo, j0), last = std::min(row.keys.hi, j0 + 15);
        float block_max = -std::numeric_limits<float>::infinity();
        for (int64_t j = first; j <= last; ++j) {
          float s = 0.0f;
          for (int64_t c = 0; c < d; ++c) s += row.q[c] * kt[c * p.lp + j];
          scores[j - j0] = s * p.scale;
          block_max = std::max(block_max, scores[j - j0]);
        }
        const float new_max = std::max(max, block_max);
        const float correction = std::exp(max - new_max);
        sum *= correction;
        for (int64_t c = 0; c < d; ++c) acc[c] *= correction;
        for (int64_t j = first; j <= last; ++j) {
          const float e = std::exp(scores[j - j0] - new_max);
          sum += e;
          const float* v = ValueRow(p, kh, j);
          for (int64_t c = 0; c < d; ++c) acc[c] += e * v[c];
        }
        max = new_max;
      }
    }
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    for (int64_t c = 0; c < d; ++c) row.out[c] = acc[c] * inv;
  }
}

#if defined(KVSERVE_SIMD_AVX512)
#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512bw,avx512vl,fma")
// GCC 12's AVX-512 reduction intrinsics start from _mm512_undefined_ps(), which it then
// reports as maybe uninitialized at every use.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// Lanes of the block starting at key j0 that `keys` contains.
inline __mmask16 LaneMask(const KeyRange& keys, int64_t j0) {
  const int64_t lo = std::clamp<int64_t>(keys.lo - j0, 0, 16);
  const int64_t hi = std::clamp<int64_t>(keys.hi - j0 + 1, 0, 16);  // one past
  if (lo >= hi) return 0;
  const uint32_t below_hi = (hi == 16) ? 0xFFFFu : ((1u << hi) - 1u);
  const uint32_t below_lo = (1u << lo) - 1u;
  return static_cast<__mmask16>(below_hi & ~below_lo);
}

// Scores of up to 8 rows against the block of 16 transposed keys at kt (row stride lp): a
// GEMM micro-kernel, each key vector loaded once for the 8 rows, 8 independent accumulators.
// Rows past num_rows repeat the last one (their scores are not used).
template <int kVectors>
inline void Scores8(const Row* rows, int64_t num_rows, const float* kt, int64_t lp, __m512 scale,
                    float (*scores)[kKeyBlock]) {
  constexpr int kDim = kVectors * 16;
  const float* q[8];
  for (int64_t r = 0; r < 8; ++r) q[r] = rows[std::min<int64_t>(r, num_rows - 1)].q;
  __m512 acc[8];
  for (int r = 0; r < 8; ++r) acc[r] = _mm512_setzero_ps();
  for (int c = 0; c < kDim; ++c) {
    const __m512 k = _mm512_loadu_ps(kt + c * lp);
    for (int r = 0; r < 8; ++r) acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(q[r][c]), k, acc[r]);
  }
  for (int64_t r = 0; r < std::min<int64_t>(8, num_rows); ++r) {
    _mm512_storeu_ps(scores[r], _mm512_mul_ps(acc[r], scale));
  }
}

// Folds a row's block of scores (lanes outside `mask` ignored) into its running maximum and
// sum, rescales its accumulator (d floats) when the maximum grew, and leaves the block's
// weights (zeros outside `mask`) in `scores`.
inline void OnlineSoftmax(float* scores, __mmask16 mask, float* max, float* sum, float* acc,
                          int64_t d) {
  if (mask == 0) {
    _mm512_storeu_ps(scores, _mm512_setzero_ps());
    return;
  }
  const __m512 s = _mm512_loadu_ps(scores);
  const float new_max = std::max(*max, _mm512_mask_reduce_max_ps(mask, s));
  if (new_max > *max) {
    const float correction = std::exp(*max - new_max);
    *sum *= correction;
    const __m512 c = _mm512_set1_ps(correction);
    for (int64_t i = 0; i < d; i += 16) {
      _mm512_storeu_ps(acc + i, _mm512_mul_ps(_mm512_loadu_ps(acc + i), c));
    }
    *max = new_max;
  }
  const __m512 e = _mm512_maskz_mov_ps(mask, Exp512(_mm512_sub_ps(s, _mm512_set1_ps(new_max))));
  *sum += _mm512_reduce_add_ps(e);
  _mm512_storeu_ps(scores, e);
}

// acc[r] += sum over keys j in [first, last] of weights[r][j - j0] * values[j], for kRows rows:
// each value vector loaded once for the rows, the accumulators in registers for the block.
template <int kVectors, int kRows>
inline void WeightedValues(const Problem& p, int64_t kh, int64_t j0, int64_t first, int64_t last,
                           float (*weights)[kKeyBlock], float* const* acc) {
  __m512 a[kRows][kVectors];
  for (int r = 0; r < kRows; ++r) {
    for (int v = 0; v < kVectors; ++v) a[r][v] = _mm512_loadu_ps(acc[r] + 16 * v);
  }
  for (int64_t j = first; j <= last; ++j) {
    const float* vrow = ValueRow(p, kh, j);
    __m512 value[kVectors];
    for (int v = 0; v < kVectors; ++v) value[v] = _mm512_loadu_ps(vrow + 16 * v);
    for (int r = 0; r < kRows; ++r) {
      const __m512 w = _mm512_set1_ps(weights[r][j - j0]);
      for (int v = 0; v < kVectors; ++v) a[r][v] = _mm512_fmadd_ps(w, value[v], a[r][v]);
    }
  }
  for (int r = 0; r < kRows; ++r) {
    for (int v = 0; v < kVectors; ++v) _mm512_storeu_ps(acc[r] + 16 * v, a[r][v]);
  }
}

// A tile's rows, key block by key block: every block's transposed keys and values are read
// from L1 for all the tile's rows, whose running state (maximum, sum, d accumulators) stays
// in a small per-thread buffer.
template <int kVectors>
void RowsAvx512(const Problem& p, int64_t kh, const Row* rows, int64_t num_rows) {
  constexpr int64_t kDim = kVectors * 16;
  // Rows per value pass: as many as keep their accumulators in registers.
  constexpr int kPvRows = kVectors <= 4 ? 4 : (kVectors <= 8 ? 2 : 1);
  const float* kt = p.kt + kh * p.d * p.lp;
  const __m512 scale = _mm512_set1_ps(p.scale);
  thread_local std::vector<float> state;
  const int64_t padded = (num_rows + kPvRows - 1) / kPvRows * kPvRows;
  state.assign(static_cast<size_t>(padded * (kDim + 2)), 0.0f);
  float* acc = state.data();
  float* max = acc + padded * kDim;
  float* sum = max + padded;
  std::fill(max, max + padded, -std::numeric_limits<float>::infinity());
  thread_local std::vector<float> weight_buffer;
  weight_buffer.assign(static_cast<size_t>((padded + 8) * kKeyBlock), 0.0f);
  auto* weights = reinterpret_cast<float(*)[kKeyBlock]>(weight_buffer.data());

  int64_t lo = std::numeric_limits<int64_t>::max(), hi = -1;
  for (int64_t r = 0; r < num_rows; ++r) {
    if (rows[r].keys.empty()) continue;
    lo = std::min(lo, rows[r].keys.lo);
    hi = std::max(hi, rows[r].keys.hi);
  }
  for (int64_t j0 = hi < 0 ? 0 : lo / kKeyBlock * kKeyBlock; j0 <= hi; j0 += kKeyBlock) {
    for (int64_t r0 = 0; r0 < num_rows; r0 += 8) {
      const int64_t count = std::min<int64_t>(8, num_rows - r0);
      Scores8<kVectors>(rows + r0, count, kt + j0, p.lp, scale, weights + r0);
      for (int64_t r = r0; r < r0 + count; ++r) {
        OnlineSoftmax(weights[r], LaneMask(rows[r].keys, j0), &max[r], &sum[r], acc + r * kDim,
                      kDim);
      }
    }
    const int64_t first = std::max(lo, j0), last = std::min(hi, j0 + kKeyBlock - 1);
    for (int64_t r0 = 0; r0 < num_rows; r0 += kPvRows) {
      float* row_acc[kPvRows];
      for (int r = 0; r < kPvRows; ++r) row_acc[r] = acc + (r0 + r) * kDim;
      WeightedValues<kVectors, kPvRows>(p, kh, j0, first, last, weights + r0, row_acc);
    }
  }
  for (int64_t r = 0; r < num_rows; ++r) {
    const __m512 inv = _mm512_set1_ps(sum[r] > 0.0f ? 1.0f / sum[r] : 0.0f);
    for (int64_t i = 0; i < kDim; i += 16) {
      _mm512_storeu_ps(rows[r].out + i, _mm512_mul_ps(_mm512_loadu_ps(acc + r * kDim + i), inv));
    }
  }
}

using RowsFn = void (*)(const Problem&, int64_t, const Row*, int64_t);

RowsFn RowsAvx512For(int64_t d) {
  switch (d / 16) {
    case 1:
      return &RowsAvx512<1>;
    case 2:
      return &RowsAvx512<2>;
    case 3:
      return &RowsAvx512<3>;
    case 4:
      return &RowsAvx512<4>;
    case 5:
      return &RowsAvx512<5>;
    case 6:
      return &RowsAvx512<6>;
    case 7:
      return &RowsAvx512<7>;
    case 8:
      return &RowsAvx512<8>;
    case 16:
      return &RowsAvx512<16>;
    default:
      return nullptr;
  }
}

#pragma GCC diagnostic pop
#pragma GCC pop_options
#else
using RowsFn = void (*)(const Problem&, int64_t, const Row*, int64_t);
RowsFn RowsAvx512For(int64_t) { return nullptr; }
#endif  // KVSERVE_SIMD_AVX512

}  // namespace

SimdLevel TiledAttentionLevel() {
  return CpuHasAvx512() ? SimdLevel::kAvx512 : SimdLevel::kPortable;
}

bool TiledAttend(const at::Tensor& queries, const cache::LayerView& kv, int64_t q_start,
                 const cache::LayerSpec& layer, double scale, at::Tensor* out, SimdLevel level) {
  if (!IsFloatAttentionInput(queries, kv)) return false;
  const int64_t n = queries.size(0), heads = queries.size(1), d = queries.size(2);
  const int64_t kv_heads = kv.keys.size(1);
  // Columns of the view: the shared prefix segment's, then the own ones.
  const int64_t prefix_len = kv.prefix_length();
  const int64_t kv_len = prefix_len + kv.keys.size(2);
  const int64_t num_valid = prefix_len + kv.num_valid;
  if (n == 0 || d == 0) return false;
  RowsFn rows_fn = nullptr;
  if (level == SimdLevel::kAvx512) {
    if (d % 16 != 0 || d / 16 > kMaxVectorsPerRow || !CpuHasAvx512()) return false;
    rows_fn = RowsAvx512For(d);
    if (rows_fn == nullptr) return false;
  } else if (level == SimdLevel::kPortable) {
    rows_fn = &RowsPortable;
  } else {
    return false;
  }
  const int64_t group = heads / kv_heads;

  // The keys any query sees end at the last query's position (or the valid keys' end).
  const int64_t used =
      std::max<int64_t>(0, std::min({num_valid, kv_len, q_start + n - kv.kv_offset}));
  const int64_t lp = std::max<int64_t>(kKeyBlock, (used + kKeyBlock - 1) / kKeyBlock * kKeyBlock);
  // Transposed keys, zero past `used` (those lanes are masked, but must be finite).
  // Only the padding past `used` is zeroed; the rest is written below.
  std::unique_ptr<float[]> kt(new float[static_cast<size_t>(kv_heads * d * lp)]);
  const float* kp = kv.keys.data_ptr<float>();
  const int64_t ks1 = kv.keys.stride(1), ks2 = kv.keys.stride(2);
  const float* pkp = prefix_len > 0 ? kv.prefix_keys.data_ptr<float>() : nullptr;
  const int64_t pks1 = prefix_len > 0 ? kv.prefix_keys.stride(1) : 0;
  const int64_t pks2 = prefix_len > 0 ? kv.prefix_keys.stride(2) : 0;
  ParallelFor(kv_heads, [&](int64_t kh) {
    float* dst = kt.get() + kh * d * lp;
    for (int64_t j = 0; j < used; ++j) {
      const float* key =
          j < prefix_len ? pkp + kh * pks1 + j * pks2 : kp + kh * ks1 + (j - prefix_len) * ks2;
      for (int64_t c = 0; c < d; ++c) dst[c * lp + j] = key[c];
    }
    for (int64_t c = 0; c < d; ++c) std::fill(dst + c * lp + used, dst + (c + 1) * lp, 0.0f);
  });

  *out = at::empty({n, heads * d}, queries.options());
  Problem problem;
  problem.d = d;
  problem.scale = static_cast<float>(scale);
  problem.kt = kt.get();
  problem.lp = lp;
  problem.values = kv.values.data_ptr<float>();
  problem.vs1 = kv.values.stride(1);
  problem.vs2 = kv.values.stride(2);
  if (prefix_len > 0) {
    problem.prefix_len = prefix_len;
    problem.prefix_values = kv.prefix_values.data_ptr<float>();
    problem.pvs1 = kv.prefix_values.stride(1);
    problem.pvs2 = kv.prefix_values.stride(2);
  }
  const float* qp = queries.data_ptr<float>();
  float* op = out->data_ptr<float>();
  const int64_t qs0 = queries.stride(0), qs1 = queries.stride(1);

  const int64_t tiles = (n + kQueryTile - 1) / kQueryTile;
  // The last tiles see the most keys (causal): they are claimed first.
  ParallelFor(tiles * kv_heads, [&](int64_t index) {
    const int64_t tile = tiles - 1 - index / kv_heads;
    const int64_t kh = index % kv_heads;
    const int64_t t0 = tile * kQueryTile, t1 = std::min(n, t0 + kQueryTile);
    Row rows[kQueryTile * 8];
    std::vector<Row> many;
    Row* tile_rows = rows;
    if ((t1 - t0) * group > static_cast<int64_t>(std::size(rows))) {
      many.resize(static_cast<size_t>((t1 - t0) * group));
      tile_rows = many.data();
    }
    int64_t count = 0;
    for (int64_t t = t0; t < t1; ++t) {
      const KeyRange keys = VisibleKeys(q_start + t, kv, layer, kv_len, num_valid);
      for (int64_t g = 0; g < group; ++g) {
        const int64_t h = kh * group + g;
        tile_rows[count++] = {qp + t * qs0 + h * qs1, op + t * heads * d + h * d, keys};
      }
    }
    rows_fn(problem, kh, tile_rows, count);
  });
  return true;
}

}  // namespace kvserve::model
