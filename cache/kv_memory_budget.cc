// KvMemoryBudget: device KV accounting and the out-of-memory it raises.
#include "cache/kv_memory_budget.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "cache/torch_compat.h"

namespace kvserve::cache {

KvMemoryBudget::KvMemoryBudget(const KvMemoryBudgetOptions& options)
    : options_(options), rng_state_(options.seed ^ 0x6a09e667f3bcc909ULL) {}

int64_t KvMemoryBudget::available() const {
  if (options_.device_limit_bytes < 0) return std::numeric_limits<int64_t>::max() / 2;
  return options_.device_limit_bytes - used_;
}

double KvMemoryBudget::NextUniform() {
  uint64_t z = (rng_state_ += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * (1.0 / 9007199254740992.0);
}

void KvMemoryBudget::CheckGrowth(int64_t grew_bytes) {
  if (options_.fault_inject_oom_rate > 0 && NextUniform() < options_.fault_inject_oom_rate) {
    ++injected_faults_;
    throw compat::OutOfMemoryError(
        {__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
        absl::StrCat("injected KV out-of-memory (--fault-inject-oom-rate) allocating ", grew_bytes,
                     " bytes"));
  }
  if (options_.device_limit_bytes >= 0 && used_ > options_.device_limit_bytes) {
    throw compat::OutOfMemoryError(
        {__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
        absl::StrCat("KV device budget exceeded: ", used_, " bytes in use after allocating ",
                     grew_bytes, ", limit ", options_.device_limit_bytes, " (--kv-device-bytes)"));
  }
}

}  // namespace kvserve::cache
