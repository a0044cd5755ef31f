// Fused float32 CPU kernels (see cpu_kernels.h).
#include "model/cpu_kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "model/simd.h"
#include "model/worker_pool.h"

namespace kvserve::model {

bool IsCpuFloat(const at::Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.scalar_type() == at::kFloat;
}

namespace {

float DotPortable(const float* a, const float* b, int64_t n) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// y += alpha * x
void AxpyPortable(float* y, float alpha, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

#if defined(KVSERVE_SIMD_AVX2)
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

float DotAvx2(const float* a, const float* b, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  }
  float sum = HorizontalSum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

void AxpyAvx2(float* y, float alpha, const float* x, int64_t n) {
  const __m256 a = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(a, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] += alpha * x[i];
}

#pragma GCC pop_options
#endif  // KVSERVE_SIMD_AVX2

DotFn Dot() {
#if defined(KVSERVE_SIMD_AVX2)
  if (CpuHasAvx2()) return &DotAvx2;
#endif
  return &DotPortable;
}

AxpyFn Axpy() {
#if defined(KVSERVE_SIMD_AVX2)
  if (CpuHasAvx2()) return &AxpyAvx2;
#endif
  return &AxpyPortable;
}

// Whether key column j (absolute position j + kv_offset, counted from the first column of
// the view's shared prefix segment, if any) is visible to the query at q_pos, as
// VisibilityMask decides it; `num_valid` counts the prefix's columns too.
inline bool Visible(int64_t j, int64_t q_pos, int64_t kv_offset, int64_t num_valid,
                    const cache::LayerSpec& layer) {
  const int64_t k_pos = j + kv_offset;
  if (j >= num_valid || k_pos > q_pos) return false;
  switch (layer.type) {
    case cache::LayerType::kFullAttention:
      return true;
    case cache::LayerType::kSlidingAttention:
      return k_pos > q_pos - layer.window;
    case cache::LayerType::kChunkedAttention:
      return k_pos / layer.window == q_pos / layer.window;
    case cache::LayerType::kMambaState:  // no attention (the Mamba forward never calls this)
      return false;
  }
  return false;
}

// SiLU-times-up rows up to which the scalar fused loop beats ATen's vectorized kernels (whose
// fixed cost dominates for a decode step).
constexpr int64_t kFusedLoopRows = 16;

// Attention work below this many multiply-adds runs on the calling thread alone.
constexpr int64_t kParallelAttendWork = int64_t{1} << 15;

}  // namespace

DotFn FloatDot() { return Dot(); }

AxpyFn FloatAxpy() { return Axpy(); }

bool FusedRotateHalf(at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, int64_t rot_dim) {
  if (!IsCpuFloat(x) || !IsCpuFloat(cos) || !IsCpuFloat(sin) || x.dim() != 3 || x.stride(2) != 1 ||
      !cos.is_contiguous() || !sin.is_contiguous() || cos.dim() != 2 || cos.size(0) != x.size(0) ||
      cos.size(1) != rot_dim || !sin.sizes().equals(cos.sizes()) || rot_dim % 2 != 0 ||
      rot_dim > x.size(2)) {
    return false;
  }
  const int64_t tokens = x.size(0), heads = x.size(1), half = rot_dim / 2;
  float* base = x.data_ptr<float>();
  const float* cp = cos.data_ptr<float>();
  const float* sp = sin.data_ptr<float>();
  for (int64_t t = 0; t < tokens; ++t) {
    const float* c = cp + t * rot_dim;
    const float* s = sp + t * rot_dim;
    for (int64_t h = 0; h < heads; ++h) {
      float* p = base + t * x.stride(0) + h * x.stride(1);
      for (int64_t i = 0; i < half; ++i) {
        const float a = p[i], b = p[i + half];
        p[i] = a * c[i] - b * s[i];
        p[i + half] = b * c[i + half] + a * s[i + half];
      }
    }
  }
  return true;
}

at::Tensor FusedSiluMul(const at::Tensor& gate_up, int64_t inter) {
  if (!IsCpuFloat(gate_up) || gate_up.dim() != 2 || !gate_up.is_contiguous() ||
      gate_up.size(1) != 2 * inter) {
    return at::Tensor();
  }
  const int64_t rows = gate_up.size(0);
  at::Tensor out = at::empty({rows, inter}, gate_up.options());
  if (rows > kFusedLoopRows) {
    ParallelForRange(rows, 1, [&](int64_t begin, int64_t end) {
      const at::Tensor slice = gate_up.narrow(0, begin, end - begin);
      at::Tensor o = out.narrow(0, begin, end - begin);
      at::silu_out(o, slice.narrow(1, 0, inter));
      o.mul_(slice.narrow(1, inter, inter));
    });
    return out;
  }
  const float* in = gate_up.data_ptr<float>();
  float* o = out.data_ptr<float>();
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = in + r * 2 * inter;
    const float* u = g + inter;
    float* y = o + r * inter;
    for (int64_t i = 0; i < inter; ++i) y[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  }
  return out;
}

at::Tensor ParallelSoftmax(const at::Tensor& scores) {
  if (!IsCpuFloat(scores) || scores.dim() < 2 || !scores.is_contiguous()) return at::Tensor();
  const int64_t cols = scores.size(-1);
  const at::Tensor rows = scores.view({-1, cols});
  const int64_t n = rows.size(0);
  at::Tensor out = at::empty_like(scores);
  const at::Tensor out_rows = out.view({-1, cols});
  ParallelForRange(n, 1, [&](int64_t begin, int64_t end) {
    at::Tensor o = out_rows.narrow(0, begin, end - begin);
    at::_softmax_out(o, rows.narrow(0, begin, end - begin), -1, false);
  });
  return out;
}

bool IsFloatAttentionInput(const at::Tensor& queries, const cache::LayerView& kv) {
  const bool own = IsCpuFloat(queries) && IsCpuFloat(kv.keys) && IsCpuFloat(kv.values) &&
                   queries.dim() == 3 && queries.stride(2) == 1 && kv.keys.dim() == 4 &&
                   kv.keys.size(0) == 1 && kv.keys.stride(3) == 1 && kv.values.stride(3) == 1 &&
                   kv.values.sizes().equals(kv.keys.sizes()) &&
                   kv.keys.size(3) == queries.size(2) && kv.keys.size(1) > 0 &&
                   queries.size(1) % kv.keys.size(1) == 0;
  if (!own || !kv.prefix_keys.defined()) return own;
  const at::Tensor& pk = kv.prefix_keys;
  const at::Tensor& pv = kv.prefix_values;
  return IsCpuFloat(pk) && IsCpuFloat(pv) && pk.dim() == 4 && pk.size(0) == 1 &&
         pv.sizes().equals(pk.sizes()) && pk.size(1) == kv.keys.size(1) &&
         pk.size(3) == kv.keys.size(3) && pk.stride(3) == 1 && pv.stride(3) == 1;
}

bool FusedAttend(const at::Tensor& queries, const cache::LayerView& kv, int64_t q_start,
                 const cache::LayerSpec& layer, double scale, at::Tensor* out, double softcap) {
  if (!IsFloatAttentionInput(queries, kv)) return false;
  const int64_t n = queries.size(0), heads = queries.size(1), d = queries.size(2);
  const int64_t kv_heads = kv.keys.size(1), kv_len = kv.keys.size(2);
  const int64_t group = heads / kv_heads;
  *out = at::empty({n, heads * d}, queries.options());

  const float* qp = queries.data_ptr<float>();
  float* op = out->data_ptr<float>();
  const int64_t qs0 = queries.stride(0), qs1 = queries.stride(1);
  const float fscale = static_cast<float>(scale);
  const float cap = static_cast<float>(softcap);
  const DotFn dot = Dot();
  const AxpyFn axpy = Axpy();
  // The view's segments in column order: the shared prefix (if any), then the own columns.
  // Both are walked in place with one softmax over all their columns.
  struct Segment {
    const float* keys = nullptr;
    const float* values = nullptr;
    int64_t ks1 = 0, ks2 = 0, vs1 = 0, vs2 = 0;
    int64_t first = 0, count = 0;  // its columns in the view: [first, first + count)
  };
  auto segment = [](const at::Tensor& k, const at::Tensor& v, int64_t first) {
    return Segment{k.data_ptr<float>(), v.data_ptr<float>(), k.stride(1), k.stride(2),
                   v.stride(1),         v.stride(2),         first,       k.size(2)};
  };
  const int64_t prefix_len = kv.prefix_length();
  std::vector<Segment> segments;
  if (prefix_len > 0) segments.push_back(segment(kv.prefix_keys, kv.prefix_values, 0));
  segments.push_back(segment(kv.keys, kv.values, prefix_len));
  const int64_t total_len = prefix_len + kv_len;
  const int64_t num_valid = prefix_len + kv.num_valid;

  // One task: one query position against one kv head, for every query head of its group.
  auto task = [&](int64_t index) {
    thread_local std::vector<float> probs;
    probs.resize(static_cast<size_t>(total_len));
    const int64_t kh = index / n, t = index % n;
    const int64_t q_pos = q_start + t;
    for (int64_t g = 0; g < group; ++g) {
      const int64_t h = kh * group + g;
      const float* q = qp + t * qs0 + h * qs1;
      float* o = op + t * heads * d + h * d;
      float max_score = -std::numeric_limits<float>::infinity();
      bool any = false;
      for (const Segment& seg : segments) {
        const float* keys = seg.keys + kh * seg.ks1;
        for (int64_t c = 0; c < seg.count; ++c) {
          const int64_t j = seg.first + c;
          if (!Visible(j, q_pos, kv.kv_offset, num_valid, layer)) continue;
          float s = dot(q, keys + c * seg.ks2, d) * fscale;
          if (cap > 0) s = cap * std::tanh(s / cap);
          probs[j] = s;
          max_score = any ? std::max(max_score, s) : s;
          any = true;
        }
      }
      for (int64_t i = 0; i < d; ++i) o[i] = 0.0f;
      if (!any) continue;
      float sum = 0.0f;
      for (const Segment& seg : segments) {
        const float* values = seg.values + kh * seg.vs1;
        for (int64_t c = 0; c < seg.count; ++c) {
          const int64_t j = seg.first + c;
          if (!Visible(j, q_pos, kv.kv_offset, num_valid, layer)) continue;
          const float p = std::exp(probs[j] - max_score);
          sum += p;
          axpy(o, p, values + c * seg.vs2, d);
        }
      }
      const float inv = 1.0f / sum;
      for (int64_t i = 0; i < d; ++i) o[i] *= inv;
    }
  };
  const int64_t tasks = kv_heads * n;
  if (tasks > 1 && n * heads * total_len * d >= kParallelAttendWork) {
    ParallelFor(tasks, task);
  } else {
    for (int64_t i = 0; i < tasks; ++i) task(i);
  }
  return true;
}

}  // namespace kvserve::model
