// The spin-then-sleep worker pool behind kvserve's CPU kernels (see worker_pool.h).
#include "model/worker_pool.h"

#include <algorithm>
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
  // Each worker starts from the generation at construction, so that one whose thread starts
  // late still wakes for a loop published before it ran (and helps if parts are left).
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

void WorkerPool::RunParts(Job& job) {
  for (int64_t part = job.next.fetch_add(1); part < job.parts; part = job.next.fetch_add(1)) {
    job.fn(part);
    job.done.fetch_add(1, std::memory_order_release);
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
    std::shared_ptr<Job> job;
    {
      std::lock_guard<std::mutex> lock(job_mutex_);
      job = job_;
    }
    if (job != nullptr) RunParts(*job);
  }
}

void WorkerPool::Run(int64_t parts, absl::FunctionRef<void(int64_t)> fn) {
  if (parts <= 0) return;
  std::lock_guard<std::mutex> lock(run_mutex_);
  if (workers_.empty() || parts == 1) {
    for (int64_t p = 0; p < parts; ++p) fn(p);
    return;
  }
  const auto job = std::make_shared<Job>(fn, parts);
  {
    std::lock_guard<std::mutex> job_lock(job_mutex_);
    job_ = job;
  }
  generation_.fetch_add(1);
  if (sleeping_.load() > 0) {
    std::lock_guard<std::mutex> sleep_lock(sleep_mutex_);
    sleep_cv_.notify_all();
  }
  RunParts(*job);
  // Every part is claimed now; wait for those a worker is still running. Yield after a short
  // spin: on a busy machine that worker may have been preempted, and spinning would only
  // keep it off the core longer.
  const auto wait_start = std::chrono::steady_clock::now();
  for (int i = 0; job->done.load(std::memory_order_acquire) < parts; ++i) {
    if (i < 64 || std::chrono::steady_clock::now() - wait_start < kPureSpin) {
      CpuRelax();
    } else {
      std::this_thread::yield();
    }
  }
  std::lock_guard<std::mutex> job_lock(job_mutex_);
  job_.reset();
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

void ParallelForRange(int64_t size, int64_t grain,
                      absl::FunctionRef<void(int64_t begin, int64_t end)> fn) {
  if (size <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t units = (size + grain - 1) / grain;
  const int64_t parts = std::clamp<int64_t>(int64_t{4} * compat::NumThreads(), 1, units);
  ParallelFor(parts, [&](int64_t part) {
    const int64_t begin = std::min(size, units * part / parts * grain);
    const int64_t end = std::min(size, units * (part + 1) / parts * grain);
    if (begin < end) fn(begin, end);
  });
}

}  // namespace kvserve::model
