// Tests of WorkerPool and ParallelFor: every part runs exactly once, a worker takes a part
// the caller leaves (including after the workers have gone to sleep), and callers from
// several threads take turns.
#include "model/worker_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "cache/torch_compat.h"

namespace kvserve::model {
namespace {

TEST(WorkerPoolTest, RunsEveryPartOnceForManyLoops) {
  WorkerPool pool(3);
  EXPECT_EQ(pool.threads(), 3);
  for (int64_t parts : {0, 1, 2, 3, 7, 64}) {
    for (int loop = 0; loop < 200; ++loop) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(parts));
      pool.Run(parts, [&](int64_t p) { hits[static_cast<size_t>(p)].fetch_add(1); });
      for (int64_t p = 0; p < parts; ++p) ASSERT_EQ(hits[p].load(), 1) << parts << "/" << p;
    }
  }
}

TEST(WorkerPoolTest, WorkersTakePartsAndWakeFromSleep) {
  // What Run guarantees: the caller runs parts itself and never waits for a worker that has
  // not claimed one. So a worker is proven to take a part only when the caller cannot finish
  // the loop alone: the caller's own part blocks until a part has run on another thread. A
  // pause before each loop, far longer than a worker's spin (300 us), lets it fall asleep, so
  // that Run must wake it. A pool whose workers never take a part (or sleep through the loop)
  // makes the caller's part time out: the test fails instead of hanging.
  constexpr auto kTimeout = std::chrono::seconds(30);
  WorkerPool pool(2);
  const std::thread::id caller = std::this_thread::get_id();
  for (int loop = 0; loop < 10; ++loop) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::mutex mutex;
    std::condition_variable cv;
    bool ran_on_worker = false;
    bool caller_timed_out = false;
    pool.Run(2, [&](int64_t) {
      std::unique_lock<std::mutex> lock(mutex);
      if (std::this_thread::get_id() != caller) {
        ran_on_worker = true;
        cv.notify_all();
        return;
      }
      // The caller holds one of the two parts: the other is left for a worker. (After a
      // timeout the caller runs the other part too, without waiting again.)
      if (caller_timed_out) return;
      if (!cv.wait_for(lock, kTimeout, [&] { return ran_on_worker; })) caller_timed_out = true;
    });
    ASSERT_FALSE(caller_timed_out)
        << "loop " << loop << ": no worker took a part in " << kTimeout.count() << " s";
    ASSERT_TRUE(ran_on_worker) << "loop " << loop;
  }
}

TEST(WorkerPoolTest, ConcurrentCallersTakeTurns) {
  WorkerPool pool(2);
  std::atomic<int64_t> total{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 3; ++c) {
    callers.emplace_back([&] {
      for (int loop = 0; loop < 100; ++loop) pool.Run(5, [&](int64_t p) { total += p + 1; });
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(total.load(), 3 * 100 * 15);
}

TEST(WorkerPoolTest, ParallelForFollowsTheThreadCount) {
  const int saved = compat::NumThreads();
  for (int threads : {1, 2, 3, 2}) {
    compat::SetNumThreads(threads);
    std::vector<std::atomic<int>> hits(10);
    ParallelFor(10, [&](int64_t p) { hits[static_cast<size_t>(p)].fetch_add(1); });
    for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  }
  compat::SetNumThreads(saved);
}

TEST(WorkerPoolTest, ParallelForRangeCoversTheRangeInWholeGrains) {
  const int saved = compat::NumThreads();
  for (int threads : {1, 2, 3}) {
    compat::SetNumThreads(threads);
    for (int64_t size : {0, 1, 15, 16, 17, 1000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(size));
      std::atomic<int> misaligned{0};
      ParallelForRange(size, 16, [&](int64_t begin, int64_t end) {
        if (begin % 16 != 0 || (end % 16 != 0 && end != size) || begin >= end) ++misaligned;
        for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
      });
      EXPECT_EQ(misaligned.load(), 0) << size;
      for (int64_t i = 0; i < size; ++i) ASSERT_EQ(hits[i].load(), 1) << size << "/" << i;
    }
  }
  compat::SetNumThreads(saved);
}

}  // namespace
}  // namespace kvserve::model
