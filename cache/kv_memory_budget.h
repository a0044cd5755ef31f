// KvMemoryBudget: the device bytes held by every KV cache of an engine, against a limit; going
// over raises the same out-of-memory error as CUDA's allocator, so one fallback path serves a
// real device OOM and the budget (and the fault injection tests use).
#pragma once

#include <cstdint>
#include <string>

namespace kvserve::cache {

struct KvMemoryBudgetOptions {
  // Device KV bytes allowed across all caches; < 0: unlimited.
  int64_t device_limit_bytes = -1;
  // Fraction of KV allocations (updates that grow a layer's device storage) that raise an
  // out-of-memory error anyway, for tests; in [0, 1].
  double fault_inject_oom_rate = 0;
  // Seeds the fault injection, so a test run is reproducible.
  uint64_t seed = 0;
};

// Caches attached to the budget (KvCache::AttachBudget) report every change of their device
// bytes. Not thread-safe: the engine thread owns the budget and every cache.
class KvMemoryBudget {
 public:
  explicit KvMemoryBudget(const KvMemoryBudgetOptions& options);

  // Whether the budget or fault injection can raise anything; when false caches skip the
  // per-step bookkeeping (recording, rollback) that only a mid-step failure needs.
  bool active() const {
    return options_.device_limit_bytes >= 0 || options_.fault_inject_oom_rate > 0;
  }
  int64_t limit() const { return options_.device_limit_bytes; }
  int64_t used() const { return used_; }
  // Bytes left under the limit (may be negative); a very large number when unlimited.
  int64_t available() const;

  // The most device bytes used at once since the start.
  int64_t peak_used() const { return peak_used_; }

  // Records a change of device bytes (negative: freed).
  void Add(int64_t delta_bytes) {
    used_ += delta_bytes;
    if (used_ > peak_used_) peak_used_ = used_;
  }
  // After a cache grew by `grew_bytes` (> 0): throws compat::OutOfMemoryError when the total
  // is over the limit or a fault is injected, with a message giving the bytes.
  void CheckGrowth(int64_t grew_bytes);

  int64_t injected_faults() const { return injected_faults_; }

 private:
  // Uniform in [0, 1) from a splitmix64 stream.
  double NextUniform();

  KvMemoryBudgetOptions options_;
  int64_t used_ = 0;
  int64_t peak_used_ = 0;
  uint64_t rng_state_;
  int64_t injected_faults_ = 0;
};

}  // namespace kvserve::cache
