// ThreadCount: sets compat::NumThreads() for a test's scope and restores it after.
#pragma once

#include "cache/torch_compat.h"

namespace kvserve::model {

class ThreadCount {
 public:
  explicit ThreadCount(int threads) : saved_(compat::NumThreads()) {
    compat::SetNumThreads(threads);
  }
  ~ThreadCount() { compat::SetNumThreads(saved_); }
  ThreadCount(const ThreadCount&) = delete;
  ThreadCount& operator=(const ThreadCount&) = delete;

 private:
  int saved_;
};

}  // namespace kvserve::model
