// OffloadStream: moves a cache layer's storage between the device and the host.
#pragma once

#include <ATen/ATen.h>

#include <optional>

#include "cache/cache_layer.h"

namespace kvserve::cache {

// Copies layer storage between the compute device and the host. With CUDA, prefetches run
// on a side stream that first waits for the compute stream (so that earlier write-backs
// have been issued), write-backs go to pinned host memory on the compute stream, and
// Join() makes the compute stream wait for the prefetches. Without CUDA (or for CPU
// "devices") the same calls copy synchronously, so the offload path runs in CPU tests too.
// One per cache; used only by the engine thread.
class OffloadStream {
 public:
  OffloadStream() = default;
  OffloadStream(const OffloadStream&) = delete;
  OffloadStream& operator=(const OffloadStream&) = delete;

  // Replaces every tensor of `layer` with a copy on `device`, asynchronously on the side
  // stream with CUDA. The copies may be read on the compute stream only after Join().
  void CopyToDevice(CacheLayer& layer, const c10::Device& device);
  // Makes the compute stream of `device` wait for every CopyToDevice issued so far.
  void Join(const c10::Device& device);
  // Replaces every tensor of `layer` with a host copy (pinned, non-blocking with CUDA). The
  // host copies may be read by the CPU only after SyncHost().
  void CopyToHost(CacheLayer& layer);
  // Waits until every CopyToHost issued for `device` has landed.
  void SyncHost(const c10::Device& device);

 private:
  std::optional<c10::Stream> side_stream_;  // CUDA only, created on first use
};

}  // namespace kvserve::cache
