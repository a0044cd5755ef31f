// What kvserve's hand-vectorized CPU kernels need to know about the CPU they run on.
//
// The kernels are compiled for AVX2 + FMA (+ F16C), or AVX-512, inside `#pragma GCC target`
// regions, whatever the build's -march, and chosen at run time; other compilers and CPUs take
// the portable loops. KVSERVE_SIMD_AVX2 and KVSERVE_SIMD_AVX512 are defined where those
// regions compile.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define KVSERVE_SIMD_AVX2 1
#define KVSERVE_SIMD_AVX512 1
#include <immintrin.h>
#endif

#include <cstdlib>
#include <string_view>

namespace kvserve::model {

// Instruction-set levels of the kernels, lowest first.
enum class SimdLevel { kPortable = 0, kAvx2 = 1, kAvx512 = 2 };

// The highest level the environment allows: KVSERVE_CPU_ISA=portable|avx2|avx512 caps the
// kernels chosen at run time (to compare them, or to rule one out); unset or anything else:
// no cap. Read once.
inline SimdLevel SimdLevelCap() {
  static const SimdLevel cap = [] {
    const char* value = std::getenv("KVSERVE_CPU_ISA");
    const std::string_view isa = value == nullptr ? "" : value;
    if (isa == "portable") return SimdLevel::kPortable;
    if (isa == "avx2") return SimdLevel::kAvx2;
    return SimdLevel::kAvx512;
  }();
  return cap;
}

// True when this CPU runs the AVX-512 (F, DQ, BW, VL) kernels and the cap allows them.
inline bool CpuHasAvx512() {
#if defined(KVSERVE_SIMD_AVX512)
  static const bool avx512 =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  return avx512 && SimdLevelCap() >= SimdLevel::kAvx512;
#else
  return false;
#endif
}

// True when this CPU also has AVX512-BF16 (vdpbf16ps: pairs of bfloat16 products summed into
// float32) and the cap allows AVX-512 kernels.
inline bool CpuHasAvx512Bf16() {
#if defined(KVSERVE_SIMD_AVX512)
  static const bool bf16 = __builtin_cpu_supports("avx512bf16");
  return bf16 && CpuHasAvx512();
#else
  return false;
#endif
}

// True when this CPU runs the AVX2 + FMA + F16C kernels (always false without
// KVSERVE_SIMD_AVX2) and the cap allows them.
inline bool CpuHasAvx2() {
#if defined(KVSERVE_SIMD_AVX2)
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                           __builtin_cpu_supports("f16c");
  return avx2 && SimdLevelCap() >= SimdLevel::kAvx2;
#else
  return false;
#endif
}

#if defined(KVSERVE_SIMD_AVX2)
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

// The sum of a vector's eight lanes, in a fixed order.
inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

#pragma GCC pop_options
#endif

#if defined(KVSERVE_SIMD_AVX512)
#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512bw,avx512vl,fma")

// e^x for each lane (relative error about 1e-7 over the float range; lanes below -87.3 give
// about 1e-38, callers zero masked lanes themselves).
inline __m512 Exp512(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.33654f));
  x = _mm512_min_ps(x, _mm512_set1_ps(88.72283f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // r = x - n ln2, with ln2 split in two so that n * hi is exact.
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
  // e^r on |r| <= ln2 / 2: Taylor to degree 7.
  __m512 e = _mm512_set1_ps(1.0f / 5040.0f);
  e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(1.0f / 720.0f));
  e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(1.0f / 120.0f));
  e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(1.0f / 24.0f));
  e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(1.0f / 6.0f));
  e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(0.5f));
  e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(1.0f));
  e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(e, n);
}

#pragma GCC pop_options
#endif

}  // namespace kvserve::model
