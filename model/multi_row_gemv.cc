// MultiRowGemv: a weight-streaming kernel for decode steps with a few sequences.
#include "model/multi_row_gemv.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <thread>
#include <vector>

namespace kvserve::model {
namespace {

// GCC/Clang vector extensions: four floats (baseline x86-64) or eight (AVX2).
typedef float Float4 __attribute__((vector_size(16)));
typedef float Float8 __attribute__((vector_size(32)));

// Output features per block: the block's weight rows (kBlock x in floats) stay in the L2
// cache while every group of x rows passes over them, so the weight is read from memory once.
constexpr int64_t kBlock = 16;

// y[r, j] = x[r] . w[j] for the kRows rows starting at x (row stride `in`), j in [begin, end).
// The accumulators are kRows registers, so kRows is a template constant.
template <typename Vec, int kLanes, int kRows>
inline void RowGroup(const float* x, const float* w, float* y, int64_t in, int64_t out,
                     int64_t begin, int64_t end) {
  const int64_t in_vec = in - in % kLanes;
  for (int64_t j = begin; j < end; ++j) {
    const float* wj = w + j * in;
    Vec acc[kRows] = {};
    for (int64_t i = 0; i < in_vec; i += kLanes) {
      Vec wv;
      __builtin_memcpy(&wv, wj + i, sizeof(wv));
      for (int r = 0; r < kRows; ++r) {
        Vec xv;
        __builtin_memcpy(&xv, x + r * in + i, sizeof(xv));
        acc[r] += wv * xv;
      }
    }
    for (int r = 0; r < kRows; ++r) {
      float sum = 0;
      for (int l = 0; l < kLanes; ++l) sum += acc[r][l];
      for (int64_t i = in_vec; i < in; ++i) sum += wj[i] * x[r * in + i];
      y[r * out + j] = sum;
    }
  }
}

template <typename Vec, int kLanes>
inline void KernelBody(const float* x, const float* w, float* y, int64_t rows, int64_t in,
                       int64_t out, int64_t begin, int64_t end) {
  for (int64_t block = begin; block < end; block += kBlock) {
    const int64_t block_end = std::min(end, block + kBlock);
    int64_t r = 0;
    for (; r + 4 <= rows; r += 4) {
      RowGroup<Vec, kLanes, 4>(x + r * in, w, y + r * out, in, out, block, block_end);
    }
    switch (rows - r) {
      case 3:
        RowGroup<Vec, kLanes, 3>(x + r * in, w, y + r * out, in, out, block, block_end);
        break;
      case 2:
        RowGroup<Vec, kLanes, 2>(x + r * in, w, y + r * out, in, out, block, block_end);
        break;
      case 1:
        RowGroup<Vec, kLanes, 1>(x + r * in, w, y + r * out, in, out, block, block_end);
        break;
      default:
        break;
    }
  }
}

__attribute__((target("avx2,fma"))) void KernelAvx2(const float* x, const float* w, float* y,
                                                    int64_t rows, int64_t in, int64_t out,
                                                    int64_t begin, int64_t end) {
  KernelBody<Float8, 8>(x, w, y, rows, in, out, begin, end);
}

void KernelBaseline(const float* x, const float* w, float* y, int64_t rows, int64_t in, int64_t out,
                    int64_t begin, int64_t end) {
  KernelBody<Float4, 4>(x, w, y, rows, in, out, begin, end);
}

// The widest kernel this CPU runs.
void Kernel(const float* x, const float* w, float* y, int64_t rows, int64_t in, int64_t out,
            int64_t begin, int64_t end) {
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (avx2) {
    KernelAvx2(x, w, y, rows, in, out, begin, end);
  } else {
    KernelBaseline(x, w, y, rows, in, out, begin, end);
  }
}

}  // namespace

at::Tensor MultiRowGemv(const at::Tensor& x, const at::Tensor& w, int num_threads) {
  TORCH_CHECK(x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(1), "MultiRowGemv: shapes");
  TORCH_CHECK(x.scalar_type() == at::kFloat && w.scalar_type() == at::kFloat,
              "MultiRowGemv: float32 only");
  TORCH_CHECK(x.device().is_cpu() && w.device().is_cpu(), "MultiRowGemv: CPU only");
  TORCH_CHECK(x.is_contiguous() && w.is_contiguous(), "MultiRowGemv: contiguous inputs only");
  const int64_t rows = x.size(0), in = x.size(1), out = w.size(0);
  TORCH_CHECK(rows >= 1 && rows <= kMultiRowGemvMaxRows, "MultiRowGemv: 1 to ",
              kMultiRowGemvMaxRows, " rows");
  at::Tensor y = at::empty({rows, out}, x.options());
  const float* xp = x.data_ptr<float>();
  const float* wp = w.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  // A thread is worth starting only for a large share of work (the LM head, not a layer).
  const int threads =
      static_cast<int>(std::clamp<int64_t>(num_threads, 1, std::max<int64_t>(1, out / 4096)));
  const int64_t chunk = ((out + threads - 1) / threads + kBlock - 1) / kBlock * kBlock;
  std::vector<std::thread> helpers;
  for (int t = 1; t < threads; ++t) {
    const int64_t begin = std::min(out, t * chunk), end = std::min(out, begin + chunk);
    if (begin < end) helpers.emplace_back([=] { Kernel(xp, wp, yp, rows, in, out, begin, end); });
  }
  Kernel(xp, wp, yp, rows, in, out, 0, std::min(out, chunk));
  for (std::thread& t : helpers) t.join();
  return y;
}

}  // namespace kvserve::model
