// Prefill projections through oneDNN (see onednn_gemm.h).
#include "model/onednn_gemm.h"

#include <ATen/ATen.h>

#include <cstdlib>
#include <string_view>

#include "cache/torch_compat.h"
#include "model/multi_row_gemv.h"
#include "model/simd.h"
#include "model/worker_pool.h"

#if defined(KVSERVE_WITH_ONEDNN)
#include <omp.h>

#include <map>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <vector>
#endif

namespace kvserve::model {

#if defined(KVSERVE_WITH_ONEDNN)
namespace {

// Rows are run as a body of a multiple of kRowQuantum and a remainder.
constexpr int64_t kRowQuantum = 64;

struct Gemm {
  dnnl::matmul primitive;
  int64_t scratchpad_bytes = 0;
};

class GemmCache {
 public:
  static GemmCache& Get() {
    static GemmCache* cache = new GemmCache();
    return *cache;
  }

  const dnnl::engine& engine() const { return engine_; }

  // The primitive for y[rows, cols] = x[rows, in] w[cols, in]^T with y's rows `ld` apart,
  // x and w of type `type` (f32 or bf16), y f32; made on first use.
  std::shared_ptr<const Gemm> For(dnnl::memory::data_type type, int64_t rows, int64_t in,
                                  int64_t cols, int64_t ld) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& slot = gemms_[{static_cast<int>(type), rows, in, cols, ld}];
    if (slot == nullptr) {
      using dt = dnnl::memory::data_type;
      const dnnl::memory::desc x_md({rows, in}, type, dnnl::memory::dims{in, 1});
      const dnnl::memory::desc w_md({in, cols}, type, dnnl::memory::dims{1, in});
      const dnnl::memory::desc y_md({rows, cols}, dt::f32, dnnl::memory::dims{ld, 1});
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
#if DNNL_VERSION_MAJOR >= 3
      dnnl::matmul::primitive_desc pd(engine_, x_md, w_md, y_md, attr);
#else
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(x_md, w_md, y_md), attr, engine_);
#endif
      auto gemm = std::make_shared<Gemm>();
      gemm->primitive = dnnl::matmul(pd);
      gemm->scratchpad_bytes = static_cast<int64_t>(pd.scratchpad_desc().get_size());
      slot = std::move(gemm);
    }
    return slot;
  }

 private:
  GemmCache() : engine_(dnnl::engine::kind::cpu, 0) {}

  dnnl::engine engine_;
  std::mutex mu_;
  std::map<std::tuple<int, int64_t, int64_t, int64_t, int64_t>, std::shared_ptr<const Gemm>> gemms_;
};

// y[rows, cols] (rows `ld` apart) = x[rows, in] w[cols, in]^T on the calling thread; x and w
// hold elements of `type`.
void Run(dnnl::memory::data_type type, const void* x, const void* w, float* y, int64_t rows,
         int64_t in, int64_t cols, int64_t ld) {
  GemmCache& cache = GemmCache::Get();
  const std::shared_ptr<const Gemm> shared = cache.For(type, rows, in, cols, ld);
  const Gemm& gemm = *shared;
  using dt = dnnl::memory::data_type;
  const dnnl::memory::desc x_md({rows, in}, type, dnnl::memory::dims{in, 1});
  const dnnl::memory::desc w_md({in, cols}, type, dnnl::memory::dims{1, in});
  const dnnl::memory::desc y_md({rows, cols}, dt::f32, dnnl::memory::dims{ld, 1});
  dnnl::memory xm(x_md, cache.engine(), const_cast<void*>(x));
  dnnl::memory wm(w_md, cache.engine(), const_cast<void*>(w));
  dnnl::memory ym(y_md, cache.engine(), y);
  thread_local std::vector<uint8_t> scratch;
  if (static_cast<int64_t>(scratch.size()) < gemm.scratchpad_bytes) {
    scratch.resize(static_cast<size_t>(gemm.scratchpad_bytes));
  }
  const dnnl::memory::desc scratch_md({gemm.scratchpad_bytes}, dt::u8, dnnl::memory::dims{1});
  dnnl::memory sm(scratch_md, cache.engine(), scratch.data());
  dnnl::stream stream(cache.engine());
  gemm.primitive.execute(
      stream,
      {{DNNL_ARG_SRC, xm}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, ym}, {DNNL_ARG_SCRATCHPAD, sm}});
  stream.wait();
}

}  // namespace

bool OnednnAvailable() {
  static const bool wanted = [] {
    const char* gemm = std::getenv("KVSERVE_PREFILL_GEMM");
    return gemm == nullptr || std::string_view(gemm) != "openblas";
  }();
  return wanted && CpuHasAvx512();
}

bool OnednnLinear(const at::Tensor& x, const at::Tensor& w, at::Tensor* y) {
  if (!OnednnAvailable() || !x.defined() || !w.defined() || !x.device().is_cpu() ||
      !w.device().is_cpu() || x.scalar_type() != at::kFloat ||
      (w.scalar_type() != at::kFloat && w.scalar_type() != at::kBFloat16) || x.dim() != 2 ||
      w.dim() != 2 || x.size(1) != w.size(1) || x.stride(1) != 1 || x.stride(0) != x.size(1) ||
      !w.is_contiguous() || x.size(0) == 0) {
    return false;
  }
  const bool bf16 = w.scalar_type() == at::kBFloat16;
  if (bf16 && ResolveBf16Compute(Bf16Compute::kNative) != Bf16Compute::kNative) return false;
  const int64_t rows = x.size(0), in = x.size(1), out = w.size(0);
  *y = at::empty({rows, out}, x.options());
  const void* xp = x.data_ptr<float>();
  if (bf16) {
    // x rounded to bfloat16 once for every part (Bf16Compute::kNative).
    thread_local std::vector<uint16_t> rounded;
    rounded.resize(static_cast<size_t>(rows * in));
    const float* src = x.data_ptr<float>();
    uint16_t* dst = rounded.data();
    ParallelForRange(rows * in, int64_t{1} << 14, [&](int64_t begin, int64_t end) {
      RoundToBf16(src + begin, dst + begin, end - begin);
    });
    xp = dst;
  }
  const dnnl::memory::data_type type =
      bf16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
  const int64_t element = bf16 ? 2 : 4;
  const char* wp = static_cast<const char*>(w.data_ptr());
  float* yp = y->data_ptr<float>();
  // The output columns are split over kvserve's worker threads, each running oneDNN on one
  // thread: a second (OpenMP) pool spinning beside the workers measured half speed.
  const int64_t parts = std::min<int64_t>(compat::NumThreads(), (out + 15) / 16);
  const int64_t slice = ((out + parts - 1) / parts + 15) & ~int64_t{15};
  const int64_t body = rows > kRowQuantum ? rows / kRowQuantum * kRowQuantum : rows;
  ParallelFor(parts, [&](int64_t part) {
    const int64_t c0 = part * slice, cols = std::min(out, c0 + slice) - c0;
    if (cols <= 0) return;
    // One oneDNN thread here; the thread's OpenMP setting (LibTorch's, on the caller) is
    // put back after.
    const int omp_threads = omp_get_max_threads();
    if (omp_threads != 1) omp_set_num_threads(1);
    Run(type, xp, wp + c0 * in * element, yp + c0, body, in, cols, out);
    if (body < rows) {
      Run(type, static_cast<const char*>(xp) + body * in * element, wp + c0 * in * element,
          yp + body * out + c0, rows - body, in, cols, out);
    }
    if (omp_threads != 1) omp_set_num_threads(omp_threads);
  });
  return true;
}

#else  // !KVSERVE_WITH_ONEDNN

bool OnednnAvailable() { return false; }
bool OnednnLinear(const at::Tensor&, const at::Tensor&, at::Tensor*) { return false; }

#endif

}  // namespace kvserve::model
