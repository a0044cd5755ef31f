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

}  // namespace kvserve::model
