// LibTorch-version and device shims (see torch_compat.h).
#include "cache/torch_compat.h"

#include <algorithm>
#include <atomic>
#include <string>

#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <malloc.h>

#if defined(KVSERVE_WITH_CUDA)
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#endif

namespace kvserve::compat {

int64_t DeviceFreeMemoryBytes(const c10::Device& device) {
#if defined(KVSERVE_WITH_CUDA)
  if (device.is_cuda()) {
    c10::cuda::CUDAGuard guard(device);
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
      return static_cast<int64_t>(free_bytes);
    }
  }
#else
  (void)device;
#endif
  return -1;
}

void EmptyDeviceCache() {
#if defined(KVSERVE_WITH_CUDA)
  c10::cuda::CUDACachingAllocator::emptyCache();
#endif
}

namespace {
std::atomic<int> g_num_threads{1};
}  // namespace

int NumThreads() { return g_num_threads.load(std::memory_order_relaxed); }

void SetNumThreads(int threads) {
  g_num_threads.store(std::max(1, threads), std::memory_order_relaxed);
  using SetThreadsFn = void (*)(int);
  auto* set_blas_threads =
      reinterpret_cast<SetThreadsFn>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  if (set_blas_threads != nullptr) {
    // OpenBLAS keeps its own pool busy-waiting between calls; a second (OpenMP) pool of the
    // same size then competes for the same cores, which measured prefill at half speed on 2
    // cores. The GEMMs and GEMVs, where the time goes, run on OpenBLAS's threads; LibTorch's
    // element-wise kernels run on the calling thread.
    set_blas_threads(threads);
    at::set_num_threads(1);
  } else {
    at::set_num_threads(threads);
  }
  // Large activations are freed and reallocated every step; keep them in the heap instead
  // of returning them to the kernel, so that each step does not page-fault its buffers in.
  // (32 MiB is glibc's largest allowed mmap threshold on 64-bit hosts.)
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
}

void SynchronizeDevice(const c10::Device& device) {
#if defined(KVSERVE_WITH_CUDA)
  if (device.is_cuda()) c10::cuda::device_synchronize();
#else
  (void)device;
#endif
}

std::string BuildDescription() {
  std::string description = "LibTorch " TORCH_VERSION;
#if defined(KVSERVE_WITH_CUDA)
  description += ", CUDA " + std::to_string(CUDART_VERSION / 1000) + "." +
                 std::to_string(CUDART_VERSION % 1000 / 10);
#else
  description += ", CPU only";
#endif
  return description;
}

CudaDevices VisibleCudaDevices() {
  CudaDevices devices;
#if defined(KVSERVE_WITH_CUDA)
  // Asked of the runtime directly: LibTorch's device_count() hides the error behind a 0.
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    cudaGetLastError();  // clears the error so later calls are not blamed for it
    // Without a driver the runtime says "driver version is insufficient": name the cause.
    void* driver = dlopen("libcuda.so.1", RTLD_LAZY);
    if (driver == nullptr) {
      devices.reason =
          "no NVIDIA driver: libcuda.so.1 cannot be loaded (in a container, run it with the "
          "NVIDIA Container Toolkit, e.g. docker run --gpus all)";
    } else {
      dlclose(driver);
      devices.reason = cudaGetErrorString(error);
    }
    return devices;
  }
  devices.count = count;
  if (count == 0) devices.reason = "no CUDA device is visible";
#else
  devices.reason = "built without CUDA";
#endif
  return devices;
}

}  // namespace kvserve::compat
