// LibTorch-version and device shims (see torch_compat.h).
#include "cache/torch_compat.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>

#if defined(KVSERVE_WITH_CUDA)
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace kvserve::compat {

void EmptyDeviceCache() {
#if defined(KVSERVE_WITH_CUDA)
  c10::cuda::CUDACachingAllocator::emptyCache();
#endif
}

void SetNumThreads(int threads) {
  at::set_num_threads(threads);
  using SetThreadsFn = void (*)(int);
  if (auto* set_blas_threads =
          reinterpret_cast<SetThreadsFn>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) {
    set_blas_threads(threads);
  }
}

void SynchronizeDevice(const c10::Device& device) {
#if defined(KVSERVE_WITH_CUDA)
  if (device.is_cuda()) c10::cuda::device_synchronize();
#else
  (void)device;
#endif
}

}  // namespace kvserve::compat
