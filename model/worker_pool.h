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
  // they may run in any order on any thread. Callers are serialized: a second caller waits
  // for the first loop to finish. fn must not call Run on the same pool.
  void Run(int64_t parts, absl::FunctionRef<void(int64_t)> fn);

 private:
  void WorkerLoop(uint64_t seen);
  void RunParts();

  std::mutex run_mutex_;  // one loop at a time
  std::vector<std::thread> workers_;
  // Incremented to publish a loop (or the stop request) to the workers.
  std::atomic<uint64_t> generation_{0};
  // Workers that stopped spinning wait on sleep_cv_; Run notifies only when there are some.
  std::mutex sleep_mutex_;
  std::condition_variable sleep_cv_;
  std::atomic<int> sleeping_{0};
  std::atomic<int> finished_{0};  // workers done with the current generation
  std::atomic<int64_t> next_part_{0};
  int64_t parts_ = 0;
  const absl::FunctionRef<void(int64_t)>* fn_ = nullptr;
  bool stop_ = false;
};

// Runs fn(part) for part in [0, parts) over compat::NumThreads() threads: inline when that
// is 1 or there is one part, otherwise on a process-wide WorkerPool of that size (rebuilt
// when the count changes). Any thread may call; loops from different threads take turns.
void ParallelFor(int64_t parts, absl::FunctionRef<void(int64_t)> fn);

}  // namespace kvserve::model
