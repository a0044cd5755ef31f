// WorkerPool: the threads kvserve's own CPU kernels split their work over.
//
// A decode step runs a few dozen short data-parallel loops (one per weight); starting
// threads for each costs more than the loop. The pool's workers stay alive, spin briefly
// after a loop so that the next one starts without a system call, and then sleep, so that
// an idle server (or OpenBLAS's own pool during a prefill GEMM) gets the cores back.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"

namespace kvserve::model {

class WorkerPool {
 public:
  // `threads` counts the calling thread: a pool of 2 starts one worker.
  explicit WorkerPool(int threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(part) once for every part in [0, parts), on the calling thread and the
  // workers, and returns when all calls have returned. Parts are claimed dynamically, so
  // they may run in any order on any thread, and the caller never waits for a worker that
  // has not claimed a part (one the OS has not scheduled yet, on a busy machine). Callers are
  // serialized: a second caller waits for the first loop to finish. fn must not call Run on
  // the same pool.
  void Run(int64_t parts, absl::FunctionRef<void(int64_t)> fn);

 private:
  // One loop. A worker that wakes late may still hold it after Run returned: it then finds
  // every part claimed and never calls fn.
  struct Job {
    Job(absl::FunctionRef<void(int64_t)> f, int64_t n) : fn(f), parts(n) {}
    absl::FunctionRef<void(int64_t)> fn;
    int64_t parts;
    std::atomic<int64_t> next{0};  // the next part to claim
    std::atomic<int64_t> done{0};  // parts whose call has returned
  };

  void WorkerLoop(uint64_t seen);
  static void RunParts(Job& job);

  std::mutex run_mutex_;  // one loop at a time
  std::vector<std::thread> workers_;
  // Incremented to publish a loop (or the stop request) to the workers.
  std::atomic<uint64_t> generation_{0};
  std::mutex job_mutex_;      // guards job_
  std::shared_ptr<Job> job_;  // the loop being run, if any
  // Workers that stopped spinning wait on sleep_cv_; Run notifies only when there are some.
  std::mutex sleep_mutex_;
  std::condition_variable sleep_cv_;
  std::atomic<int> sleeping_{0};
  std::atomic<bool> stop_{false};
};

// Runs fn(part) for part in [0, parts) over compat::NumThreads() threads: inline when that
// is 1 or there is one part, otherwise on a process-wide WorkerPool of that size (rebuilt
// when the count changes). Any thread may call; loops from different threads take turns.
void ParallelFor(int64_t parts, absl::FunctionRef<void(int64_t)> fn);

// Splits [0, size) into ranges of whole multiples of `grain` (the last may end short), a few
// per thread so that a thread slowed by another process does not hold the loop back, and
// calls fn(begin, end) for each over ParallelFor.
void ParallelForRange(int64_t size, int64_t grain,
                      absl::FunctionRef<void(int64_t begin, int64_t end)> fn);

}  // namespace kvserve::model
