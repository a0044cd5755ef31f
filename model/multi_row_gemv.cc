// MultiRowGemv and WidenWeight (see multi_row_gemv.h).
#include "model/multi_row_gemv.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "model/simd.h"
#include "model/worker_pool.h"

namespace kvserve::model {
namespace {

enum class WeightKind { kF32, kBF16, kF16 };

// Output features per block: the block's weight rows stay in the L1/L2 cache while every
// group of x rows passes over them, so the weight is read from memory once.
constexpr int64_t kBlock = 16;

// Kernel signature: rows of x against output features [begin, end) of w.
using KernelFn = void (*)(const float* x, const void* w, float* y, int64_t rows, int64_t in,
                          int64_t out, int64_t begin, int64_t end);
using WidenFn = void (*)(const void* w, float* dst, int64_t begin, int64_t end);

// Portable kernels (no AVX2): scalar; like the vector kernels, each row of y is computed the
// same way whatever else is in the batch.

template <WeightKind K>
inline float LoadScalar(const void* w, int64_t i) {
  if constexpr (K == WeightKind::kF32) {
    return static_cast<const float*>(w)[i];
  } else if constexpr (K == WeightKind::kBF16) {
    return static_cast<float>(static_cast<const c10::BFloat16*>(w)[i]);
  } else {
    return static_cast<float>(static_cast<const c10::Half*>(w)[i]);
  }
}

template <WeightKind K>
void KernelPortable(const float* x, const void* w, float* y, int64_t rows, int64_t in, int64_t out,
                    int64_t begin, int64_t end) {
  for (int64_t j = begin; j < end; ++j) {
    for (int64_t r = 0; r < rows; ++r) {
      float sum = 0.0f;
      for (int64_t i = 0; i < in; ++i) sum += LoadScalar<K>(w, j * in + i) * x[r * in + i];
      y[r * out + j] = sum;
    }
  }
}

template <WeightKind K>
void WidenPortable(const void* w, float* dst, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) dst[i] = LoadScalar<K>(w, i);
}

#if defined(KVSERVE_SIMD_AVX2)
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

// Eight consecutive weight elements, widened to float32 (for WidenWeight).
template <WeightKind K>
inline __m256 Load8(const void* w, int64_t i) {
  if constexpr (K == WeightKind::kF32) {
    return _mm256_loadu_ps(static_cast<const float*>(w) + i);
  } else if constexpr (K == WeightKind::kBF16) {
    // A bfloat16 is the upper half of a float32: widen to 32 bits and shift into place.
    const __m128i h =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(w) + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  } else {
    const __m128i h =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(w) + i));
    return _mm256_cvtph_ps(h);
  }
}

// Sixteen consecutive weight elements as two float32 vectors. bfloat16 takes the cheapest
// widening, interleaving each word with a zero word, which leaves the elements in the order
// [0-3, 8-11] and [4-7, 12-15]; x is permuted the same way beforehand (PermuteForBf16).
template <WeightKind K>
inline void Load16(const void* w, int64_t i, __m256* lo, __m256* hi) {
  if constexpr (K == WeightKind::kF32) {
    *lo = _mm256_loadu_ps(static_cast<const float*>(w) + i);
    *hi = _mm256_loadu_ps(static_cast<const float*>(w) + i + 8);
  } else if constexpr (K == WeightKind::kBF16) {
    const __m256i v =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(w) + i));
    const __m256i zero = _mm256_setzero_si256();
    *lo = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, v));
    *hi = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, v));
  } else {
    const uint16_t* p = static_cast<const uint16_t*>(w) + i;
    *lo = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    *hi = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)));
  }
}

// How far ahead of the current element a weight row is prefetched. The hardware
// prefetchers stop at page boundaries; a steady software prefetch keeps enough lines in
// flight (measured on the 32000x512 LM head, bfloat16, 2 threads: 10.5 GB/s reading four
// rows side by side, 14 GB/s one row at a time with this prefetch).
constexpr int64_t kPrefetchBytes = 2048;

// y[r, j] for kRows rows of x against weight row j, read front to back once. Each row has
// two accumulators (the two halves of a 16-element chunk); y[r, j] is computed the same way
// for any kRows. x is the prepared input (permuted for bfloat16; its tail past the last
// whole chunk is not permuted).
template <WeightKind K, int kRows>
inline void RowTile(const float* x, const void* w, float* y, int64_t in, int64_t out, int64_t j) {
  constexpr int64_t kElementBytes = K == WeightKind::kF32 ? 4 : 2;
  const int64_t in16 = in - in % 16;
  const char* row = static_cast<const char*>(w) + j * in * kElementBytes;
  __m256 lo[kRows], hi[kRows];
  for (int r = 0; r < kRows; ++r) lo[r] = hi[r] = _mm256_setzero_ps();
  for (int64_t i = 0; i < in16; i += 16) {
    _mm_prefetch(row + i * kElementBytes + kPrefetchBytes, _MM_HINT_T0);
    __m256 wl, wh;
    Load16<K>(w, j * in + i, &wl, &wh);
    for (int r = 0; r < kRows; ++r) {
      lo[r] = _mm256_fmadd_ps(wl, _mm256_loadu_ps(x + r * in + i), lo[r]);
      hi[r] = _mm256_fmadd_ps(wh, _mm256_loadu_ps(x + r * in + i + 8), hi[r]);
    }
  }
  for (int r = 0; r < kRows; ++r) {
    float sum = HorizontalSum(_mm256_add_ps(lo[r], hi[r]));
    for (int64_t i = in16; i < in; ++i) sum += LoadScalar<K>(w, j * in + i) * x[r * in + i];
    y[r * out + j] = sum;
  }
}

template <WeightKind K, int kRows>
inline void RowGroup(const float* x, const void* w, float* y, int64_t in, int64_t out,
                     int64_t begin, int64_t end) {
  for (int64_t j = begin; j < end; ++j) RowTile<K, kRows>(x, w, y, in, out, j);
}

template <WeightKind K>
void KernelAvx2(const float* x, const void* w, float* y, int64_t rows, int64_t in, int64_t out,
                int64_t begin, int64_t end) {
  for (int64_t block = begin; block < end; block += kBlock) {
    const int64_t block_end = std::min(end, block + kBlock);
    int64_t r = 0;
    for (; r + 4 <= rows; r += 4) {
      RowGroup<K, 4>(x + r * in, w, y + r * out, in, out, block, block_end);
    }
    switch (rows - r) {
      case 3:
        RowGroup<K, 3>(x + r * in, w, y + r * out, in, out, block, block_end);
        break;
      case 2:
        RowGroup<K, 2>(x + r * in, w, y + r * out, in, out, block, block_end);
        break;
      case 1:
        RowGroup<K, 1>(x + r * in, w, y + r * out, in, out, block, block_end);
        break;
      default:
        break;
    }
  }
}

// x rearranged to meet Load16's bfloat16 lane order: within every whole 16-element chunk,
// elements [0-3, 8-11, 4-7, 12-15].
void PermuteForBf16(const float* x, float* dst, int64_t rows, int64_t in) {
  const int64_t in16 = in - in % 16;
  for (int64_t r = 0; r < rows; ++r) {
    const float* src = x + r * in;
    float* d = dst + r * in;
    for (int64_t i = 0; i < in16; i += 16) {
      std::memcpy(d + i, src + i, 4 * sizeof(float));
      std::memcpy(d + i + 4, src + i + 8, 4 * sizeof(float));
      std::memcpy(d + i + 8, src + i + 4, 4 * sizeof(float));
      std::memcpy(d + i + 12, src + i + 12, 4 * sizeof(float));
    }
    std::memcpy(d + in16, src + in16, (in - in16) * sizeof(float));
  }
}

template <WeightKind K>
void WidenAvx2(const void* w, float* dst, int64_t begin, int64_t end) {
  int64_t i = begin;
  for (; i + 8 <= end; i += 8) _mm256_storeu_ps(dst + i, Load8<K>(w, i));
  for (; i < end; ++i) dst[i] = LoadScalar<K>(w, i);
}

#pragma GCC pop_options
#endif  // KVSERVE_SIMD_AVX2

#if defined(KVSERVE_SIMD_AVX512)
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512dq,avx512bw,avx512vl,avx512bf16")
// GCC 12's AVX-512 cast and extract intrinsics start from an undefined vector, which it then
// reports as maybe uninitialized at every use.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

void RoundToBf16Avx512(const float* x, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(x + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), (__m256i)h);
  }
  if (i < n) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m256bh h = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mask, x + i));
    _mm256_mask_storeu_epi16(dst + i, mask, (__m256i)h);
  }
}

inline __m512bh LoadBf16x32(const uint16_t* p) { return (__m512bh)_mm512_loadu_si512(p); }

// The sum of a vector's sixteen lanes, in a fixed order.
inline float Sum16(__m512 v) {
  return HorizontalSum(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
}

// y[r, j] for kRows rows of bfloat16 x against bfloat16 weight row j: vdpbf16ps over 64
// elements per step into two accumulators per row, a 32-element step and a masked tail
// after; y[r, j] is computed the same way for any kRows.
template <int kRows>
inline void RowTileBf16Native(const uint16_t* x, const uint16_t* w, float* y, int64_t in,
                              int64_t out, int64_t j) {
  const uint16_t* row = w + j * in;
  __m512 a0[kRows], a1[kRows];
  for (int r = 0; r < kRows; ++r) a0[r] = a1[r] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 64 <= in; i += 64) {
    const char* ahead = reinterpret_cast<const char*>(row + i) + kPrefetchBytes;
    _mm_prefetch(ahead, _MM_HINT_T0);
    _mm_prefetch(ahead + 64, _MM_HINT_T0);
    const __m512bh w0 = LoadBf16x32(row + i), w1 = LoadBf16x32(row + i + 32);
    for (int r = 0; r < kRows; ++r) {
      a0[r] = _mm512_dpbf16_ps(a0[r], w0, LoadBf16x32(x + r * in + i));
      a1[r] = _mm512_dpbf16_ps(a1[r], w1, LoadBf16x32(x + r * in + i + 32));
    }
  }
  if (i + 32 <= in) {
    const __m512bh w0 = LoadBf16x32(row + i);
    for (int r = 0; r < kRows; ++r) {
      a0[r] = _mm512_dpbf16_ps(a0[r], w0, LoadBf16x32(x + r * in + i));
    }
    i += 32;
  }
  if (i < in) {
    const __mmask32 mask = static_cast<__mmask32>((uint64_t{1} << (in - i)) - 1);
    const __m512bh w0 = (__m512bh)_mm512_maskz_loadu_epi16(mask, row + i);
    for (int r = 0; r < kRows; ++r) {
      a1[r] = _mm512_dpbf16_ps(a1[r], w0, (__m512bh)_mm512_maskz_loadu_epi16(mask, x + r * in + i));
    }
  }
  for (int r = 0; r < kRows; ++r) y[r * out + j] = Sum16(_mm512_add_ps(a0[r], a1[r]));
}

template <int kRows>
inline void RowGroupBf16Native(const uint16_t* x, const uint16_t* w, float* y, int64_t in,
                               int64_t out, int64_t begin, int64_t end) {
  for (int64_t j = begin; j < end; ++j) RowTileBf16Native<kRows>(x, w, y, in, out, j);
}

void KernelBf16Native(const uint16_t* x, const uint16_t* w, float* y, int64_t rows, int64_t in,
                      int64_t out, int64_t begin, int64_t end) {
  for (int64_t block = begin; block < end; block += kBlock) {
    const int64_t block_end = std::min(end, block + kBlock);
    int64_t r = 0;
    for (; r + 4 <= rows; r += 4) {
      RowGroupBf16Native<4>(x + r * in, w, y + r * out, in, out, block, block_end);
    }
    switch (rows - r) {
      case 3:
        RowGroupBf16Native<3>(x + r * in, w, y + r * out, in, out, block, block_end);
        break;
      case 2:
        RowGroupBf16Native<2>(x + r * in, w, y + r * out, in, out, block, block_end);
        break;
      case 1:
        RowGroupBf16Native<1>(x + r * in, w, y + r * out, in, out, block, block_end);
        break;
      default:
        break;
    }
  }
}

#pragma GCC diagnostic pop
#pragma GCC pop_options
#endif  // KVSERVE_SIMD_AVX512

template <WeightKind K>
KernelFn PickKernel() {
#if defined(KVSERVE_SIMD_AVX2)
  if (CpuHasAvx2()) return &KernelAvx2<K>;
#endif
  return &KernelPortable<K>;
}

template <WeightKind K>
WidenFn PickWiden() {
#if defined(KVSERVE_SIMD_AVX2)
  if (CpuHasAvx2()) return &WidenAvx2<K>;
#endif
  return &WidenPortable<K>;
}

WeightKind KindOf(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
      return WeightKind::kF32;
    case at::kBFloat16:
      return WeightKind::kBF16;
    case at::kHalf:
      return WeightKind::kF16;
    default:
      KVSERVE_CHECK(false) << "MultiRowGemv: weight dtype " << dtype
                           << " is not float32, bfloat16 or float16";
  }
}

KernelFn KernelFor(at::ScalarType dtype) {
  switch (KindOf(dtype)) {
    case WeightKind::kF32:
      return PickKernel<WeightKind::kF32>();
    case WeightKind::kBF16:
      return PickKernel<WeightKind::kBF16>();
    case WeightKind::kF16:
      return PickKernel<WeightKind::kF16>();
  }
  return nullptr;
}

WidenFn WidenFor(at::ScalarType dtype) {
  switch (KindOf(dtype)) {
    case WeightKind::kF32:
      return PickWiden<WeightKind::kF32>();
    case WeightKind::kBF16:
      return PickWiden<WeightKind::kBF16>();
    case WeightKind::kF16:
      return PickWiden<WeightKind::kF16>();
  }
  return nullptr;
}

}  // namespace

Bf16Compute ResolveBf16Compute(Bf16Compute wanted) {
  return wanted == Bf16Compute::kNative && CpuHasAvx512Bf16() ? Bf16Compute::kNative
                                                              : Bf16Compute::kExact;
}

void RoundToBf16(const float* x, uint16_t* dst, int64_t n) {
#if defined(KVSERVE_SIMD_AVX512)
  if (CpuHasAvx512Bf16()) {
    RoundToBf16Avx512(x, dst, n);
    return;
  }
#endif
  for (int64_t i = 0; i < n; ++i) {
    const float v = std::fpclassify(x[i]) == FP_SUBNORMAL ? std::copysign(0.0f, x[i]) : x[i];
    dst[i] = c10::BFloat16(v).x;
  }
}

bool IsGemvWeightDtype(at::ScalarType dtype) {
  return dtype == at::kFloat || dtype == at::kBFloat16 || dtype == at::kHalf;
}

at::Tensor MultiRowGemv(const at::Tensor& x, const at::Tensor& w, Bf16Compute bf16) {
  KVSERVE_CHECK(x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(1)) << "MultiRowGemv: shapes";
  KVSERVE_CHECK(x.scalar_type() == at::kFloat) << "MultiRowGemv: x must be float32";
  KVSERVE_CHECK(x.device().is_cpu() && w.device().is_cpu()) << "MultiRowGemv: CPU only";
  KVSERVE_CHECK(x.is_contiguous() && w.is_contiguous()) << "MultiRowGemv: contiguous inputs only";
  const int64_t rows = x.size(0), in = x.size(1), out = w.size(0);
  KVSERVE_CHECK(rows >= 1 && rows <= kMultiRowGemvMaxRows)
      << "MultiRowGemv: 1 to " << kMultiRowGemvMaxRows << " rows";
  at::Tensor y = at::empty({rows, out}, x.options());
  const float* xp = x.data_ptr<float>();
#if defined(KVSERVE_SIMD_AVX512)
  if (w.scalar_type() == at::kBFloat16 && ResolveBf16Compute(bf16) == Bf16Compute::kNative) {
    thread_local std::vector<uint16_t> rounded;  // reused: no allocation per projection
    rounded.resize(static_cast<size_t>(rows * in));
    RoundToBf16Avx512(xp, rounded.data(), rows * in);
    const uint16_t* xb = rounded.data();
    const uint16_t* wb = static_cast<const uint16_t*>(w.data_ptr());
    float* yp = y.data_ptr<float>();
    ParallelForRange(out, kBlock, [&](int64_t begin, int64_t end) {
      KernelBf16Native(xb, wb, yp, rows, in, out, begin, end);
    });
    return y;
  }
#endif
  const KernelFn kernel = KernelFor(w.scalar_type());
#if defined(KVSERVE_SIMD_AVX2)
  thread_local std::vector<float> permuted;  // reused: no allocation per projection
  if (w.scalar_type() == at::kBFloat16 && CpuHasAvx2()) {
    permuted.resize(static_cast<size_t>(rows * in));
    PermuteForBf16(xp, permuted.data(), rows, in);
    xp = permuted.data();
  }
#endif
  const void* wp = w.data_ptr();
  float* yp = y.data_ptr<float>();
  ParallelForRange(out, kBlock, [&](int64_t begin, int64_t end) {
    kernel(xp, wp, yp, rows, in, out, begin, end);
  });
  return y;
}

at::Tensor WidenWeight(const at::Tensor& w, at::Tensor* scratch) {
  KVSERVE_CHECK(w.device().is_cpu() && w.is_contiguous()) << "WidenWeight: contiguous CPU weight";
  const WidenFn widen = WidenFor(w.scalar_type());
  const int64_t n = w.numel();
  if (!scratch->defined() || scratch->numel() < n) {
    *scratch = at::empty({n}, at::TensorOptions().dtype(at::kFloat));
  }
  const void* src = w.data_ptr();
  float* dst = scratch->data_ptr<float>();
  ParallelForRange(n, int64_t{1} << 16,
                   [&](int64_t begin, int64_t end) { widen(src, dst, begin, end); });
  return scratch->narrow(0, 0, n).view(w.sizes());
}

}  // namespace kvserve::model
