// Cascade attention over a shared prefix segment (see cascade_attention.h).
#include "model/cascade_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "model/attention.h"
#include "model/cpu_kernels.h"
#include "model/simd.h"
#include "model/worker_pool.h"

namespace kvserve::model {
namespace {

// Segment columns per task of the segment's part: 256 keys and values of head_dim 64 in
// float32 are 128 KiB, which stay in L2 while every query of the group reads them.
constexpr int64_t kSegmentBlock = 256;

#if defined(KVSERVE_SIMD_AVX512)
#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512bw,avx512vl,fma")
// GCC 12's AVX-512 reduction intrinsics start from _mm512_undefined_ps(), which it then
// reports as maybe uninitialized at every use.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// acc[r][0, 16 * kVec) += sum over keys j < len of w[r * ws + j] * values[j * vs], for kRows
// rows: each value vector loaded once for the rows, the accumulators in registers.
template <int kRows, int kVec>
inline void WeightedRows(const float* w, int64_t ws, const float* values, int64_t vs, int64_t len,
                         float* const* acc) {
  __m512 a[kRows][kVec];
  for (int r = 0; r < kRows; ++r) {
    for (int v = 0; v < kVec; ++v) a[r][v] = _mm512_setzero_ps();
  }
  for (int64_t j = 0; j < len; ++j) {
    __m512 value[kVec];
    for (int v = 0; v < kVec; ++v) value[v] = _mm512_loadu_ps(values + j * vs + 16 * v);
    for (int r = 0; r < kRows; ++r) {
      const __m512 weight = _mm512_set1_ps(w[r * ws + j]);
      for (int v = 0; v < kVec; ++v) a[r][v] = _mm512_fmadd_ps(weight, value[v], a[r][v]);
    }
  }
  for (int r = 0; r < kRows; ++r) {
    for (int v = 0; v < kVec; ++v) _mm512_storeu_ps(acc[r] + 16 * v, a[r][v]);
  }
}

template <int kRows>
void WeightedRowsAllDims(const float* w, int64_t ws, const float* values, int64_t vs, int64_t len,
                         int64_t d, float* const* acc) {
  float* shifted[kRows];
  int64_t c = 0;
  for (; c + 64 <= d; c += 64) {
    for (int r = 0; r < kRows; ++r) shifted[r] = acc[r] + c;
    WeightedRows<kRows, 4>(w, ws, values + c, vs, len, shifted);
  }
  for (; c < d; c += 16) {
    for (int r = 0; r < kRows; ++r) shifted[r] = acc[r] + c;
    WeightedRows<kRows, 1>(w, ws, values + c, vs, len, shifted);
  }
}

// The segment block of keys/values [0, len) (row strides ks, vs; head_dim d a multiple of 16)
// for `rows` query rows (q[r]: d floats): per row the block's maximum score, the sum of
// e^(score - maximum) and the values weighted by those (acc: d floats per row). The keys are
// transposed 16 at a time, so that 8 rows' scores take one FMA per key vector and dimension
// (each key vector loaded once for the 8 rows); e^x runs 16 lanes at a time.
void SegmentBlock512(const float* const* q, int64_t rows, const float* keys, int64_t ks,
                     const float* values, int64_t vs, int64_t len, int64_t d, float scale,
                     float* max_out, float* sum_out, float* acc_out) {
  const int64_t padded = (len + 15) / 16 * 16;
  thread_local std::vector<float> kt, scores;
  kt.assign(static_cast<size_t>(d * padded), 0.0f);
  for (int64_t j = 0; j < len; ++j) {
    const float* k = keys + j * ks;
    for (int64_t c = 0; c < d; ++c) kt[c * padded + j] = k[c];
  }
  scores.resize(static_cast<size_t>(8 * padded));
  const __m512 vscale = _mm512_set1_ps(scale);
  const __mmask16 tail =
      len % 16 == 0 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << (len % 16)) - 1u);
  for (int64_t r0 = 0; r0 < rows; r0 += 8) {
    const int64_t nr = std::min<int64_t>(8, rows - r0);
    const float* qr[8];
    for (int64_t r = 0; r < 8; ++r) qr[r] = q[r0 + std::min<int64_t>(r, nr - 1)];
    for (int64_t jb = 0; jb < padded; jb += 16) {
      __m512 acc[8];
      for (int r = 0; r < 8; ++r) acc[r] = _mm512_setzero_ps();
      const float* kc = kt.data() + jb;
      for (int64_t c = 0; c < d; ++c) {
        const __m512 k = _mm512_loadu_ps(kc + c * padded);
        for (int r = 0; r < 8; ++r) acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(qr[r][c]), k, acc[r]);
      }
      for (int64_t r = 0; r < nr; ++r) {
        _mm512_storeu_ps(scores.data() + r * padded + jb, _mm512_mul_ps(acc[r], vscale));
      }
    }
    for (int64_t r = 0; r < nr; ++r) {
      float* s = scores.data() + r * padded;
      __m512 mx = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
      for (int64_t jb = 0; jb < padded; jb += 16) {
        const __mmask16 mask = jb + 16 <= len ? __mmask16{0xFFFF} : tail;
        mx = _mm512_mask_max_ps(mx, mask, mx, _mm512_loadu_ps(s + jb));
      }
      const float m = _mm512_reduce_max_ps(mx);
      const __m512 vm = _mm512_set1_ps(m);
      __m512 sum = _mm512_setzero_ps();
      for (int64_t jb = 0; jb < padded; jb += 16) {
        const __mmask16 mask = jb + 16 <= len ? __mmask16{0xFFFF} : tail;
        const __m512 e =
            _mm512_maskz_mov_ps(mask, Exp512(_mm512_sub_ps(_mm512_loadu_ps(s + jb), vm)));
        _mm512_storeu_ps(s + jb, e);
        sum = _mm512_add_ps(sum, e);
      }
      max_out[r0 + r] = m;
      sum_out[r0 + r] = _mm512_reduce_add_ps(sum);
    }
    for (int64_t rr = 0; rr < nr; rr += 4) {
      float* out[4];
      const int64_t n4 = std::min<int64_t>(4, nr - rr);
      for (int64_t r = 0; r < n4; ++r) out[r] = acc_out + (r0 + rr + r) * d;
      const float* w = scores.data() + rr * padded;
      switch (n4) {
        case 4:
          WeightedRowsAllDims<4>(w, padded, values, vs, len, d, out);
          break;
        case 3:
          WeightedRowsAllDims<3>(w, padded, values, vs, len, d, out);
          break;
        case 2:
          WeightedRowsAllDims<2>(w, padded, values, vs, len, d, out);
          break;
        default:
          WeightedRowsAllDims<1>(w, padded, values, vs, len, d, out);
          break;
      }
    }
  }
}

#pragma GCC diagnostic pop
#pragma GCC pop_options
#endif

}  // namespace

bool CanCascade(const std::vector<CascadeMember>& members, const cache::LayerSpec& layer) {
  if (members.size() < 2 || layer.type != cache::LayerType::kFullAttention) return false;
  const cache::LayerView& first = members.front().view;
  const int64_t prefix_len = first.prefix_length();
  if (prefix_len == 0 || !IsCpuFloat(first.prefix_keys) || !IsCpuFloat(first.prefix_values) ||
      first.prefix_keys.stride(3) != 1 || first.prefix_values.stride(3) != 1) {
    return false;
  }
  for (const CascadeMember& m : members) {
    const cache::LayerView& v = m.view;
    if (v.prefix_length() != prefix_len ||
        v.prefix_keys.data_ptr() != first.prefix_keys.data_ptr() ||
        v.prefix_values.data_ptr() != first.prefix_values.data_ptr() || v.kv_offset != 0 ||
        m.q_start < prefix_len || !IsCpuFloat(m.queries) || m.queries.dim() != 3 ||
        m.queries.stride(2) != 1 || !IsCpuFloat(v.keys) || !IsCpuFloat(v.values) ||
        v.keys.dim() != 4 || v.keys.size(0) != 1 || v.keys.stride(3) != 1 ||
        v.values.stride(3) != 1 || !v.values.sizes().equals(v.keys.sizes()) ||
        v.keys.size(1) != first.prefix_keys.size(1) ||
        v.keys.size(3) != first.prefix_keys.size(3) || m.queries.size(2) != v.keys.size(3) ||
        m.queries.size(1) % v.keys.size(1) != 0 ||
        m.queries.size(1) != members.front().queries.size(1) || !IsCpuFloat(m.out) ||
        !m.out.is_contiguous() || m.out.size(0) != m.queries.size(0) ||
        m.out.size(1) != m.queries.size(1) * m.queries.size(2)) {
      return false;
    }
  }
  return true;
}

bool CascadeAttend(const std::vector<CascadeMember>& members, const cache::LayerSpec& layer,
                   double scale, double softcap) {
  if (!CanCascade(members, layer)) return false;
  const cache::LayerView& shared = members.front().view;
  const int64_t heads = members.front().queries.size(1);
  const int64_t d = members.front().queries.size(2);
  const int64_t kv_heads = shared.prefix_keys.size(1);
  const int64_t group = heads / kv_heads;
  const float fscale = static_cast<float>(scale);
  const float cap = static_cast<float>(softcap);

  // The segment's part for every query of the group, on the worker pool (a GEMM would wake
  // OpenBLAS's busy-waiting threads, which then compete with the pool's for the same cores):
  // one task per kv head and block of segment columns reads the block's keys and values once
  // for all the group's queries (the block stays in cache across them) and keeps, per query,
  // the block's softmax statistics (max, sum, weighted values); the blocks merge exactly.
  std::vector<int64_t> first_row;  // per member: its first query in the stacked [M] order
  int64_t total = 0;
  for (const CascadeMember& m : members) {
    first_row.push_back(total);
    total += m.queries.size(0);
  }
  const int64_t rows = total * group;  // queries per kv head: (stacked query, group member)
  std::vector<const float*> query(static_cast<size_t>(kv_heads * rows));
  for (size_t i = 0; i < members.size(); ++i) {
    const at::Tensor& q = members[i].queries;
    for (int64_t t = 0; t < q.size(0); ++t) {
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t kh = h / group, g = h % group;
        query[kh * rows + (first_row[i] + t) * group + g] =
            q.data_ptr<float>() + t * q.stride(0) + h * q.stride(1);
      }
    }
  }
  const int64_t prefix_len = shared.prefix_length();
  const int64_t blocks = (prefix_len + kSegmentBlock - 1) / kSegmentBlock;
  std::vector<float> block_max(static_cast<size_t>(kv_heads * blocks * rows));
  std::vector<float> block_sum(block_max.size());
  std::vector<float> block_acc(block_max.size() * d);
  const DotFn dot = FloatDot();
  const AxpyFn axpy = FloatAxpy();
  const float* seg_k = shared.prefix_keys.data_ptr<float>();
  const float* seg_v = shared.prefix_values.data_ptr<float>();
  const int64_t sk1 = shared.prefix_keys.stride(1), sk2 = shared.prefix_keys.stride(2);
  const int64_t sv1 = shared.prefix_values.stride(1), sv2 = shared.prefix_values.stride(2);
  // The AVX-512 block kernel where the CPU has it (not for capped scores, which keep the loop).
  [[maybe_unused]] const bool avx512 = cap <= 0 && d % 16 == 0 && CpuHasAvx512();
  auto segment_block = [&](int64_t index) {
    const int64_t kh = index / blocks, b = index % blocks;
    const int64_t j0 = b * kSegmentBlock, j1 = std::min(prefix_len, j0 + kSegmentBlock);
    const float* kp = seg_k + kh * sk1;
    const float* vp = seg_v + kh * sv1;
#if defined(KVSERVE_SIMD_AVX512)
    if (avx512) {
      const int64_t slot = (kh * blocks + b) * rows;
      SegmentBlock512(query.data() + kh * rows, rows, kp + j0 * sk2, sk2, vp + j0 * sv2, sv2,
                      j1 - j0, d, fscale, block_max.data() + slot, block_sum.data() + slot,
                      block_acc.data() + slot * d);
      return;
    }
#endif
    thread_local std::vector<float> s;
    s.resize(static_cast<size_t>(kSegmentBlock));
    for (int64_t r = 0; r < rows; ++r) {
      const float* qv = query[kh * rows + r];
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t j = j0; j < j1; ++j) {
        float score = dot(qv, kp + j * sk2, d) * fscale;
        if (cap > 0) score = cap * std::tanh(score / cap);
        s[j - j0] = score;
        mx = std::max(mx, score);
      }
      const int64_t slot = (kh * blocks + b) * rows + r;
      float* acc = block_acc.data() + slot * d;
      std::fill(acc, acc + d, 0.0f);
      float sum = 0.0f;
      for (int64_t j = j0; j < j1; ++j) {
        const float p = std::exp(s[j - j0] - mx);
        sum += p;
        axpy(acc, p, vp + j * sv2, d);
      }
      block_max[slot] = mx;
      block_sum[slot] = sum;
    }
  };
  if (kv_heads * blocks > 1) {
    ParallelFor(kv_heads * blocks, segment_block);
  } else {
    segment_block(0);
  }
  // The blocks' statistics merged per query: [kh][row] max and sum, [kh][row][d] values.
  std::vector<float> seg_max(static_cast<size_t>(kv_heads * rows));
  std::vector<float> seg_sum(seg_max.size());
  std::vector<float> seg_acc(seg_max.size() * d, 0.0f);
  for (int64_t kh = 0; kh < kv_heads; ++kh) {
    for (int64_t r = 0; r < rows; ++r) {
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t b = 0; b < blocks; ++b) {
        mx = std::max(mx, block_max[(kh * blocks + b) * rows + r]);
      }
      float sum = 0.0f;
      float* acc = seg_acc.data() + (kh * rows + r) * d;
      for (int64_t b = 0; b < blocks; ++b) {
        const int64_t slot = (kh * blocks + b) * rows + r;
        const float w = std::exp(block_max[slot] - mx);
        sum += block_sum[slot] * w;
        axpy(acc, w, block_acc.data() + slot * d, d);
      }
      seg_max[kh * rows + r] = mx;
      seg_sum[kh * rows + r] = sum;
    }
  }
  const float* pm = seg_max.data();
  const float* ps = seg_sum.data();
  const float* pa = seg_acc.data();

  // Each member's own columns, merged with the segment's statistics. One task: one member's
  // query position and kv head, for the query heads of its group.
  struct Task {
    int64_t member, t, kh;
  };
  std::vector<Task> tasks;
  for (size_t i = 0; i < members.size(); ++i) {
    for (int64_t t = 0; t < members[i].queries.size(0); ++t) {
      for (int64_t kh = 0; kh < kv_heads; ++kh) tasks.push_back({static_cast<int64_t>(i), t, kh});
    }
  }
  auto run = [&](int64_t index) {
    const Task& task = tasks[index];
    const CascadeMember& m = members[task.member];
    const at::Tensor& keys = m.view.keys;
    const at::Tensor& values = m.view.values;
    const int64_t q_pos = m.q_start + task.t;
    // Own column j sits at position prefix_len + j: visible up to the query's own position.
    const int64_t visible =
        std::max<int64_t>(0, std::min(m.view.num_valid, q_pos - m.view.kv_offset - prefix_len + 1));
    const float* kp = keys.data_ptr<float>() + task.kh * keys.stride(1);
    const float* vp = values.data_ptr<float>() + task.kh * values.stride(1);
    const int64_t ks2 = keys.stride(2), vs2 = values.stride(2);
    thread_local std::vector<float> s;
    s.resize(static_cast<size_t>(std::max<int64_t>(visible, 1)));
    for (int64_t g = 0; g < group; ++g) {
      const int64_t h = task.kh * group + g;
      const float* qv =
          m.queries.data_ptr<float>() + task.t * m.queries.stride(0) + h * m.queries.stride(1);
      // The row of this query in the segment's statistics: [kh][stacked row * group + g].
      const int64_t row = task.kh * total * group + (first_row[task.member] + task.t) * group + g;
      float max2 = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < visible; ++j) {
        s[j] = dot(qv, kp + j * ks2, d) * fscale;
        if (cap > 0) s[j] = cap * std::tanh(s[j] / cap);
        max2 = std::max(max2, s[j]);
      }
      const float max1v = pm[row];
      const float m_all = std::max(max1v, max2);
      const float w1 = std::exp(max1v - m_all);
      float* o = m.out.data_ptr<float>() + task.t * heads * d + h * d;
      const float* a1 = pa + row * d;
      float sum = ps[row] * w1;
      for (int64_t c = 0; c < d; ++c) o[c] = a1[c] * w1;
      for (int64_t j = 0; j < visible; ++j) {
        const float p = std::exp(s[j] - m_all);
        sum += p;
        axpy(o, p, vp + j * vs2, d);
      }
      const float inv = 1.0f / sum;
      for (int64_t c = 0; c < d; ++c) o[c] *= inv;
    }
  };
  const int64_t n_tasks = static_cast<int64_t>(tasks.size());
  if (n_tasks > 1) {
    ParallelFor(n_tasks, run);
  } else {
    for (int64_t i = 0; i < n_tasks; ++i) run(i);
  }
  return true;
}

bool CanCascadeTensors(const std::vector<CascadeMember>& members, const cache::LayerSpec& layer) {
  if (members.size() < 2 || layer.type != cache::LayerType::kFullAttention) return false;
  const cache::LayerView& first = members.front().view;
  const int64_t prefix_len = first.prefix_length();
  if (prefix_len == 0 || !first.prefix_values.defined() || first.prefix_keys.dim() != 4 ||
      first.prefix_keys.size(0) != 1 ||
      !first.prefix_values.sizes().equals(first.prefix_keys.sizes())) {
    return false;
  }
  const at::Device device = first.prefix_keys.device();
  const int64_t heads = members.front().queries.dim() == 3 ? members.front().queries.size(1) : 0;
  for (const CascadeMember& m : members) {
    const cache::LayerView& v = m.view;
    if (v.prefix_length() != prefix_len ||
        v.prefix_keys.data_ptr() != first.prefix_keys.data_ptr() ||
        v.prefix_values.data_ptr() != first.prefix_values.data_ptr() || v.kv_offset != 0 ||
        m.q_start < prefix_len || m.queries.dim() != 3 || m.queries.size(1) != heads ||
        m.queries.device() != device || v.keys.dim() != 4 || v.keys.size(0) != 1 ||
        !v.values.sizes().equals(v.keys.sizes()) || v.keys.device() != device ||
        v.keys.size(1) != first.prefix_keys.size(1) ||
        v.keys.size(3) != first.prefix_keys.size(3) || m.queries.size(2) != v.keys.size(3) ||
        heads % v.keys.size(1) != 0 || !m.out.defined() || m.out.dim() != 2 ||
        m.out.size(0) != m.queries.size(0) || m.out.size(1) != heads * m.queries.size(2) ||
        m.out.device() != device) {
      return false;
    }
  }
  return true;
}

namespace {

// Scores in float32, scaled and (softcap > 0) capped.
at::Tensor Scores(const at::Tensor& q, const at::Tensor& k, double scale, double softcap) {
  at::Tensor s = at::bmm(q, k.transpose(1, 2));
  if (s.scalar_type() != at::kFloat) s = s.to(at::kFloat);
  s.mul_(scale);
  if (softcap > 0) s.div_(softcap).tanh_().mul_(softcap);
  return s;
}

}  // namespace

bool CascadeAttendTensors(const std::vector<CascadeMember>& members, const cache::LayerSpec& layer,
                          double scale, double softcap) {
  if (!CanCascadeTensors(members, layer)) return false;
  const cache::LayerView& shared = members.front().view;
  const int64_t heads = members.front().queries.size(1);
  const int64_t d = members.front().queries.size(2);
  const int64_t kv_heads = shared.prefix_keys.size(1);
  const int64_t group = heads / kv_heads;
  const int64_t prefix_len = shared.prefix_length();
  const at::Tensor pk = shared.prefix_keys.select(0, 0);    // [kv_heads, P, d]
  const at::Tensor pv = shared.prefix_values.select(0, 0);  // [kv_heads, P, d]

  // The segment's part: every query of the group, one GEMM per kv head over the segment.
  std::vector<at::Tensor> stacked;
  for (const CascadeMember& m : members) stacked.push_back(m.queries);
  const at::Tensor all = at::cat(stacked, 0).to(pk.scalar_type());  // [M, heads, d]
  const int64_t total = all.size(0);
  // [M, heads, d] -> [kv_heads, group * M, d]: the queries sharing a kv head are one matrix.
  const at::Tensor q = all.permute({1, 0, 2}).reshape({kv_heads, group * total, d});
  at::Tensor s1 = Scores(q, pk, scale, softcap);  // [kv_heads, group * M, P]
  const at::Tensor max1 = std::get<0>(s1.max(-1, /*keepdim=*/true));
  s1.sub_(max1).exp_();
  const at::Tensor sum1 = s1.sum(-1, /*keepdim=*/true);
  const at::Tensor out1 = at::bmm(s1.to(pv.scalar_type()), pv).to(at::kFloat);
  const auto per_query = [&](const at::Tensor& t) {
    return t.view({kv_heads, group, total, t.size(-1)});
  };
  const at::Tensor max1q = per_query(max1), sum1q = per_query(sum1), out1q = per_query(out1);

  // Each member's own columns, then the merge: with m the larger of the two maxima, the output
  // is (out1 e^(max1 - m) + out2) / (sum1 e^(max1 - m) + sum2), out2 and sum2 taken at m.
  int64_t row = 0;
  for (const CascadeMember& m : members) {
    const int64_t n = m.queries.size(0);
    const int64_t own = m.view.keys.size(2);
    const at::Tensor k = m.view.keys.select(0, 0).to(pk.scalar_type());
    const at::Tensor v = m.view.values.select(0, 0).to(pv.scalar_type());
    const at::Tensor qm =
        m.queries.to(pk.scalar_type()).permute({1, 0, 2}).reshape({kv_heads, group * n, d});
    at::Tensor s2 = Scores(qm, k, scale, softcap).view({kv_heads, group, n, own});
    const at::Tensor visible =
        VisibilityMask(n, m.q_start, m.view, layer, m.queries.device()).narrow(1, prefix_len, own);
    s2.masked_fill_(visible.logical_not(), -std::numeric_limits<float>::infinity());
    const at::Tensor m1 = max1q.narrow(2, row, n);
    const at::Tensor top = at::maximum(m1, std::get<0>(s2.max(-1, /*keepdim=*/true)));
    s2.sub_(top).exp_();  // masked columns: exp(-inf) = 0
    const at::Tensor w1 = (m1 - top).exp_();
    const at::Tensor sum = sum1q.narrow(2, row, n) * w1 + s2.sum(-1, /*keepdim=*/true);
    at::Tensor out = at::bmm(s2.view({kv_heads, group * n, own}).to(v.scalar_type()), v)
                         .to(at::kFloat)
                         .view({kv_heads, group, n, d});
    out.add_(out1q.narrow(2, row, n) * w1).div_(sum);
    // [kv_heads, group, n, d] -> [n, heads * d]
    m.out.copy_(out.permute({2, 0, 1, 3}).reshape({n, heads * d}));
    row += n;
  }
  return true;
}

}  // namespace kvserve::model
