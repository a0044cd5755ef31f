// MemoryUsage: bytes of K/V by where they live (no LibTorch, for headers that only count).
#pragma once

#include <cstdint>

namespace kvserve::cache {

// Bytes a cache holds, by where they live. On CPU builds "device" is host memory too, but the
// split is kept so that offloading and the device budget behave the same as on a GPU.
struct MemoryUsage {
  int64_t device_bytes = 0;
  int64_t host_bytes = 0;

  int64_t total() const { return device_bytes + host_bytes; }
  MemoryUsage& operator+=(const MemoryUsage& o) {
    device_bytes += o.device_bytes;
    host_bytes += o.host_bytes;
    return *this;
  }
  bool operator==(const MemoryUsage&) const = default;
};

}  // namespace kvserve::cache
