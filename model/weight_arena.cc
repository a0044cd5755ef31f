// MoveToHugePageArena (see weight_arena.h).
#include "model/weight_arena.h"

#include <ATen/ATen.h>
#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string_view>

namespace kvserve::model {
namespace {

constexpr int64_t kHugePage = int64_t{2} << 20;
constexpr int64_t kAlignment = 64;  // each tensor's start: a cache line, as LibTorch's

int64_t RoundUp(int64_t value, int64_t to) { return (value + to - 1) / to * to; }

bool Wanted() {
  const char* value = std::getenv("KVSERVE_WEIGHT_HUGEPAGES");
  return value == nullptr || std::string_view(value) != "0";
}

}  // namespace

int64_t MoveToHugePageArena(const std::vector<at::Tensor*>& tensors) {
  if (!Wanted()) return 0;
  // One copy per distinct storage start; tensors sharing one are pointed at the same copy.
  std::map<const void*, int64_t> offsets;
  int64_t total = 0;
  for (const at::Tensor* t : tensors) {
    if (!t->defined() || !t->device().is_cpu() || !t->is_contiguous() || t->nbytes() == 0) {
      continue;
    }
    if (offsets.emplace(t->data_ptr(), total).second) {
      total += RoundUp(static_cast<int64_t>(t->nbytes()), kAlignment);
    }
  }
  if (total < kHugePage) return 0;
  // Over-allocate by one huge page to align the start; the whole mapping is unmapped at the end.
  const size_t length = static_cast<size_t>(RoundUp(total, kHugePage) + kHugePage);
  void* mapping =
      ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapping == MAP_FAILED) return 0;
  const auto address = reinterpret_cast<uintptr_t>(mapping);
  char* base = reinterpret_cast<char*>(RoundUp(static_cast<int64_t>(address), kHugePage));
  // Advice only: without transparent huge pages the arena is plain memory.
  ::madvise(base, static_cast<size_t>(RoundUp(total, kHugePage)), MADV_HUGEPAGE);
  const std::shared_ptr<void> arena(mapping, [length](void* p) { ::munmap(p, length); });

  std::map<const void*, at::Tensor> moved;
  for (at::Tensor* t : tensors) {
    const auto at = offsets.find(t->defined() ? t->data_ptr() : nullptr);
    if (at == offsets.end() || !t->is_contiguous() || !t->device().is_cpu()) continue;
    auto [copy, fresh] = moved.try_emplace(at->first);
    if (!fresh && (!copy->second.sizes().equals(t->sizes()) ||
                   copy->second.scalar_type() != t->scalar_type())) {
      continue;  // a different view of the same bytes: left where it is
    }
    if (fresh) {
      char* destination = base + at->second;
      std::memcpy(destination, t->data_ptr(), t->nbytes());
      copy->second = at::from_blob(
          destination, t->sizes(), t->strides(), [arena](void*) {}, t->options());
    }
    *t = copy->second;
  }
  return total;
}

}  // namespace kvserve::model
