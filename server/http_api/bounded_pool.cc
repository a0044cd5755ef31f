// BoundedPool: fixed workers, no queue beyond them; the overflow is refused quickly.
#include "server/http_api/bounded_pool.h"

#include <utility>

namespace kvserve::server::http_api {
namespace {
thread_local bool t_refusing = false;
}  // namespace

BoundedPool::BoundedPool(int workers, int overflow_workers) {
  {
    // A worker is idle from its creation, before its thread first waits: connections accepted
    // while the threads are still starting (a busy machine can take a while to run 160 new
    // threads) wait for them instead of being refused.
    absl::MutexLock lock(&mu_);
    main_.idle = workers;
    overflow_.idle = overflow_workers;
  }
  for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { Work(&main_, false); });
  for (int i = 0; i < overflow_workers; ++i) {
    threads_.emplace_back([this] { Work(&overflow_, true); });
  }
}

BoundedPool::~BoundedPool() { shutdown(); }

bool BoundedPool::refusing() { return t_refusing; }

BoundedPool::EnqueueResult BoundedPool::enqueue(std::function<void()> fn) {
  {
    absl::MutexLock lock(&mu_);
    // A connection waits only for a worker that is already free.
    if (static_cast<int>(main_.tasks.size()) < main_.idle) {
      main_.tasks.push_back(std::move(fn));
    } else {
      overflow_.tasks.push_back(std::move(fn));
    }
  }
  // Accepted: `true` where the interface returns bool, nothing where it returns void.
  return static_cast<EnqueueResult>(true);
}

void BoundedPool::shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_ && threads_.empty()) return;
    stopping_ = true;
  }
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

void BoundedPool::Work(Queue* queue, bool overflow) {
  t_refusing = overflow;
  while (true) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this, queue]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return stopping_ || !queue->tasks.empty();
      };
      mu_.Await(absl::Condition(&ready));
      --queue->idle;
      if (queue->tasks.empty()) return;  // stopping, nothing left
      task = std::move(queue->tasks.front());
      queue->tasks.pop_front();
    }
    task();
    absl::MutexLock lock(&mu_);
    ++queue->idle;
  }
}

}  // namespace kvserve::server::http_api
