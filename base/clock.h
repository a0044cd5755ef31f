// Clock: the injectable source of time for TTLs and ages, so that tests never sleep.
#pragma once

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace kvserve::base {

// A source of wall-clock time. Implementations are thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  // The current time. Any thread.
  virtual absl::Time Now() const = 0;
};

// absl::Now(). Stateless; RealClock::Get() is a process-wide instance that is never destroyed.
class RealClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }

  // The shared instance; valid for the whole program.
  static const RealClock* Get() {
    static const RealClock* const kClock = new RealClock();
    return kClock;
  }
};

// A clock that moves only when told to (tests). Starts at `start`; thread-safe.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::UnixEpoch()) : now_(start) {}

  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  // Moves the clock forward by `d` (or back, for a negative `d`).
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }
  void Set(absl::Time t) {
    absl::MutexLock lock(&mu_);
    now_ = t;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvserve::base
