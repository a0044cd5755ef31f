// BoundedPool: cpp-httplib's task queue for kvserve's HTTP port: a fixed number of workers each
// serving one connection at a time. A connection that finds every worker busy is not queued:
// a small overflow pool answers it 429 at once (see refusing()).
#pragma once

#include <httplib.h>

#include <deque>
#include <functional>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace kvserve::server::http_api {

class BoundedPool final : public httplib::TaskQueue {
 public:
  // `workers` >= 1 threads serve connections; `overflow_workers` >= 1 threads answer the
  // connections that came while all were busy.
  BoundedPool(int workers, int overflow_workers);
  ~BoundedPool() override;

  // What enqueue returns: void in cpp-httplib 0.11 (Debian 12), bool (accepted) in later ones
  // (Debian 13).
  using EnqueueResult =
      decltype(std::declval<httplib::TaskQueue&>().enqueue(std::function<void()>()));

  // httplib's accept loop hands each connection here; never blocks, always accepts.
  EnqueueResult enqueue(std::function<void()> fn) override;
  // Lets the threads finish the connections they have and joins them.
  void shutdown() override;

  // Whether the calling thread is an overflow worker: its handlers answer 429.
  static bool refusing();

 private:
  struct Queue {
    std::deque<std::function<void()>> tasks;
    int idle = 0;
  };
  void Work(Queue* queue, bool overflow);

  absl::Mutex mu_;
  Queue main_ ABSL_GUARDED_BY(mu_);
  Queue overflow_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace kvserve::server::http_api
