// Device <-> host copies of cache layers for offloading (see offload_stream.h).
#include "cache/offload_stream.h"

#include "cache/torch_compat.h"

#if defined(KVSERVE_WITH_CUDA)
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace kvserve::cache {

void OffloadStream::CopyToDevice(CacheLayer& layer, const c10::Device& device) {
#if defined(KVSERVE_WITH_CUDA)
  if (device.is_cuda()) {
    if (!side_stream_) side_stream_ = c10::cuda::getStreamFromPool(false, device.index());
    c10::cuda::CUDAStream side(c10::cuda::CUDAStream::UNCHECKED, *side_stream_);
    c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream(device.index());
    at::cuda::CUDAEvent issued;
    issued.record(compute);
    issued.block(side);
    c10::cuda::CUDAStreamGuard guard(side);
    layer.ForEachTensor([&](at::Tensor& t) {
      at::Tensor copy = at::empty(t.sizes(), t.options().device(device));
      copy.copy_(t, /*non_blocking=*/true);
      // Allocated on the side stream but used on the compute stream: keep the allocator
      // from reusing the block before the compute stream is done with it.
      c10::cuda::CUDACachingAllocator::recordStream(copy.storage().data_ptr(), compute);
      t = std::move(copy);
    });
    return;
  }
#endif
  layer.ForEachTensor([&](at::Tensor& t) {
    t = t.to(t.options().device(device), /*non_blocking=*/false, /*copy=*/true);
  });
}

void OffloadStream::Join(const c10::Device& device) {
#if defined(KVSERVE_WITH_CUDA)
  if (device.is_cuda() && side_stream_) {
    c10::cuda::CUDAStream side(c10::cuda::CUDAStream::UNCHECKED, *side_stream_);
    at::cuda::CUDAEvent done;
    done.record(side);
    done.block(c10::cuda::getCurrentCUDAStream(device.index()));
  }
#else
  (void)device;
#endif
}

void OffloadStream::CopyToHost(CacheLayer& layer) {
  layer.ForEachTensor([&](at::Tensor& t) {
#if defined(KVSERVE_WITH_CUDA)
    if (t.is_cuda()) {
      at::Tensor host = at::empty(t.sizes(), t.options().device(at::kCPU).pinned_memory(true));
      host.copy_(t, /*non_blocking=*/true);
      t = std::move(host);
      return;
    }
#endif
    t = t.to(t.options().device(at::kCPU), /*non_blocking=*/false, /*copy=*/true);
  });
}

void OffloadStream::SyncHost(const c10::Device& device) {
#if defined(KVSERVE_WITH_CUDA)
  if (device.is_cuda()) c10::cuda::getCurrentCUDAStream(device.index()).synchronize();
#else
  (void)device;
#endif
}

}  // namespace kvserve::cache
