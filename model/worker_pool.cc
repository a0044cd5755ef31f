// The spin-then-sleep worker pool behind kvserve's CPU kernels (see worker_pool.h).
#include "model/worker_pool.h"

#include <chrono>
#include <memory>

#include "cache/torch_compat.h"

namespace kvserve::model {
namespace {

// How long an idle worker polls for the next loop before it sleeps. A decode step's loops
// follow each other within tens of microseconds; between steps the engine samples and
// schedules for about as long. After kPureSpin the worker yields between polls, so that
// another pool's thread on the same core (OpenBLAS's, during a prefill GEMM) runs first.
constexpr auto kPureSpin = std::chrono::microseconds(30);
constexpr auto kSpin = std::chrono::microseconds(300);

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

WorkerPool::WorkerPool(int threads) {
  // Each worker starts from the generation at construction: one that starts late must still
  // take part in a loop published before it ran.
  const uint64_t start = generation_.load();
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, start] { WorkerLoop(start); });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(run_mutex_);
    stop_ = true;
    generation_.fetch_add(1);
    std::lock_guard<std::mutex> sleep_lock(sleep_mutex_);
    sleep_cv_.notify_all();
  }
  for (std::thread& t : workers_) t.join();
}

void WorkerPool::RunParts() {
  for (int64_t part = next_part_.fetch_add(1); part < parts_; part = next_part_.fetch_add(1)) {
    (*fn_)(part);
  }
}

void WorkerPool::WorkerLoop(uint64_t seen) {
  while (true) {
    const auto spin_start = std::chrono::steady_clock::now();
    bool yielding = false;
    uint64_t now = generation_.load(std::memory_order_acquire);
    for (int i = 0; now == seen; ++i) {
      if (yielding) {
        std::this_thread::yield();
      } else {
        CpuRelax();
      }
      const bool check_clock = yielding || (i & 63) == 63;
      const auto elapsed =
          check_clock ? std::chrono::steady_clock::now() - spin_start : std::chrono::nanoseconds(0);
      yielding = elapsed > kPureSpin;
      if (elapsed > kSpin) {
        // Announce the sleep before re-checking the generation: Run either sees the count
        // and notifies, or this check sees its new generation (both sequentially
        // consistent), so no loop is missed.
        std::unique_lock<std::mutex> lock(sleep_mutex_);
        sleeping_.fetch_add(1);
        sleep_cv_.wait(lock, [&] { return generation_.load() != seen; });
        sleeping_.fetch_sub(1);
      }
      now = generation_.load(std::memory_order_acquire);
    }
    seen = now;
    if (stop_) return;
    RunParts();
    finished_.fetch_add(1, std::memory_order_acq_rel);
  }
}

void WorkerPool::Run(int64_t parts, absl::FunctionRef<void(int64_t)> fn) {
  if (parts <= 0) return;
  std::lock_guard<std::mutex> lock(run_mutex_);
  if (workers_.empty() || parts == 1) {
    for (int64_t p = 0; p < parts; ++p) fn(p);
    return;
  }
  fn_ = &fn;
  parts_ = parts;
  next_part_.store(0, std::memory_order_relaxed);
  finished_.store(0, std::memory_order_relaxed);
  generation_.fetch_add(1);  // publishes fn_, parts_ and the counters
  if (sleeping_.load() > 0) {
    std::lock_guard<std::mutex> sleep_lock(sleep_mutex_);
    sleep_cv_.notify_all();
  }
  RunParts();
  // Wait for the workers' last parts. Yield after a short spin: on a busy machine a worker
  // may have been preempted, and spinning would only keep it off the core longer.
  const int workers = static_cast<int>(workers_.size());
  const auto wait_start = std::chrono::steady_clock::now();
  for (int i = 0; finished_.load(std::memory_order_acquire) < workers; ++i) {
    if (i < 64 || std::chrono::steady_clock::now() - wait_start < kPureSpin) {
      CpuRelax();
    } else {
      std::this_thread::yield();
    }
  }
  fn_ = nullptr;
}

void ParallelFor(int64_t parts, absl::FunctionRef<void(int64_t)> fn) {
  const int threads = compat::NumThreads();
  if (threads <= 1 || parts <= 1) {
    for (int64_t p = 0; p < parts; ++p) fn(p);
    return;
  }
  static std::mutex mutex;
  static std::shared_ptr<WorkerPool> pool;
  std::shared_ptr<WorkerPool> current;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (pool == nullptr || pool->threads() != threads) {
      pool = std::make_shared<WorkerPool>(threads);
    }
    current = pool;
  }
  current->Run(parts, fn);
}

}  // namespace kvserve::model
