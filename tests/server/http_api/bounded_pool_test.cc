// BoundedPool: which connections its workers serve and which its overflow threads refuse.
#include "server/http_api/bounded_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"

namespace kvserve::server::http_api {
namespace {

struct Ran {
  absl::Notification done;
  std::atomic<bool> refused{false};
};

// A task that records whether it ran on an overflow thread, then holds its thread until
// `release` is notified.
std::function<void()> Holding(Ran* ran, absl::Notification* release) {
  return [ran, release] {
    ran->refused = BoundedPool::refusing();
    ran->done.Notify();
    release->WaitForNotification();
  };
}

TEST(BoundedPoolTest, ConnectionsRightAfterTheStartWaitForTheStartingWorkers) {
  // Handed over before the new threads had a chance to run: each still finds a worker (was:
  // a worker counted as free only once its thread waited, so these went to the overflow).
  for (int round = 0; round < 5; ++round) {
    constexpr int kWorkers = 64;
    BoundedPool pool(kWorkers, 1);
    absl::Notification release;
    std::vector<Ran> ran(kWorkers);
    for (Ran& r : ran) pool.enqueue(Holding(&r, &release));
    for (Ran& r : ran) {
      r.done.WaitForNotification();
      EXPECT_FALSE(r.refused) << "round " << round;
    }
    release.Notify();
    pool.shutdown();
  }
}

TEST(BoundedPoolTest, TheConnectionBeyondBusyWorkersIsRefusedThenAFreedWorkerServes) {
  BoundedPool pool(2, 1);
  absl::Notification release;
  Ran first, second, third;
  pool.enqueue(Holding(&first, &release));
  pool.enqueue(Holding(&second, &release));
  first.done.WaitForNotification();
  second.done.WaitForNotification();
  absl::Notification no_hold;
  no_hold.Notify();
  pool.enqueue(Holding(&third, &no_hold));
  third.done.WaitForNotification();
  EXPECT_FALSE(first.refused);
  EXPECT_FALSE(second.refused);
  EXPECT_TRUE(third.refused);
  release.Notify();
  // Both workers free again (a worker counts as free once its task returned): served.
  for (int i = 0; i < 100; ++i) {
    Ran later;
    pool.enqueue(Holding(&later, &no_hold));
    later.done.WaitForNotification();
    if (!later.refused) {
      pool.shutdown();
      return;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  ADD_FAILURE() << "no connection was served after the workers were freed";
  pool.shutdown();
}

}  // namespace
}  // namespace kvserve::server::http_api
