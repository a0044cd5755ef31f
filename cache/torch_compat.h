// The one place where LibTorch-version and device differences live (1.13 CPU vs 2.x CUDA).
#pragma once

#include <ATen/ATen.h>

#include <c10/util/Exception.h>
#include <torch/version.h>
#include <cstdint>
#include <string>

#define KVSERVE_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||          \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace kvserve::compat {

// at::scaled_dot_product_attention exists from LibTorch 2.0.
inline constexpr bool kHasSdpa = KVSERVE_TORCH_AT_LEAST(2, 0);
// at::kFloat8_e4m3fn exists from LibTorch 2.1.
inline constexpr bool kHasFloat8 = KVSERVE_TORCH_AT_LEAST(2, 1);
// Built against a LibTorch with CUDA (CMake defines KVSERVE_WITH_CUDA only then).
#if defined(KVSERVE_WITH_CUDA)
inline constexpr bool kWithCuda = true;
#else
inline constexpr bool kWithCuda = false;
#endif

// The exception CUDA's caching allocator throws when the device is full. kvserve's own
// device-budget accounting throws the same type so one fallback path serves both.
using OutOfMemoryError = c10::OutOfMemoryError;

// Free bytes on a CUDA device as the driver reports them; -1 for the CPU or without CUDA.
int64_t DeviceFreeMemoryBytes(const c10::Device& device);

// Releases cached, unused device blocks back to the driver; a no-op without CUDA.
void EmptyDeviceCache();

// Sets how many CPU threads compute uses. With OpenBLAS (Debian's libopenblas0-pthread) its
// pool gets `threads` and LibTorch's intra-op pool one, so two pools never compete for the
// same cores; otherwise LibTorch's pool gets `threads`. Also keeps freed large buffers in
// the heap (glibc), so that steps do not page-fault fresh activations in. Call once at start.
void SetNumThreads(int threads);

// The count SetNumThreads was last given (1 before any call): for kernels of our own that
// split their work over threads.
int NumThreads();

// Waits until all queued work on `device` has finished; a no-op on CPU.
void SynchronizeDevice(const c10::Device& device);

// What this binary was built against, for messages: "LibTorch 1.13.0, CPU only" or
// "LibTorch 2.6.0, CUDA 12.4".
std::string BuildDescription();

// The CUDA devices this process can use. `count` is 0 without CUDA, without a driver or
// without a visible device; `reason` then says why in a few words (the CUDA runtime's own
// error string when it gave one). Initializes the CUDA runtime on first call.
struct CudaDevices {
  int count = 0;
  std::string reason;
};
CudaDevices VisibleCudaDevices();

}  // namespace kvserve::compat
