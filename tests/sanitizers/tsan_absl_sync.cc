// ThreadSanitizer builds only: the happens-before edges of an uninstrumented abseil's Mutex,
// CondVar and Notification, which our code and gRPC's synchronise through.
//
// Debian's libabsl is built without -fsanitize=thread, so TSan sees none of its locking and
// reports every ABSL_GUARDED_BY field touched by two threads as a race. Linked into each
// executable of a KVSERVE_SANITIZE=thread build (see the top CMakeLists.txt), these
// definitions interpose the library's: each calls the library's function (dlsym RTLD_NEXT),
// then tells TSan what it did (__tsan_release before giving a lock up, __tsan_acquire after
// taking it). gRPC's own calls into libabsl_synchronization go through the PLT and so reach
// these too. The wrapped functions are exactly those that lock, unlock or wait; the library's
// internal slow paths are not entered by anything else.
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/base/options.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace {

#define KVSERVE_STRINGIFY_INNER(x) #x
#define KVSERVE_STRINGIFY(x) KVSERVE_STRINGIFY_INNER(x)

// The library's definition of the abseil symbol whose mangled name, after "_ZN4absl<ns>" (or
// "_ZNK..." for const members), is `rest`. Aborts when the library does not export it: a
// silent miss would bring the false reports back.
void* Next(bool is_const, const char* rest) {
  std::string name = is_const ? "_ZNK4absl" : "_ZN4absl";
#if ABSL_OPTION_USE_INLINE_NAMESPACE
  const char* ns = KVSERVE_STRINGIFY(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  name += std::to_string(std::strlen(ns)) + ns;
#endif
  name += rest;
  void* real = dlsym(RTLD_NEXT, name.c_str());
  if (real == nullptr) {
    std::fprintf(stderr, "tsan_absl_sync: %s not found in the abseil library\n", name.c_str());
    std::abort();
  }
  return real;
}

template <typename Fn>
Fn NextFn(bool is_const, const char* rest) {
  return reinterpret_cast<Fn>(Next(is_const, rest));
}

void Acquire(const void* addr) { __tsan_acquire(const_cast<void*>(addr)); }
void Release(const void* addr) { __tsan_release(const_cast<void*>(addr)); }

// A condition as the library evaluates it: under the lock, but on whichever thread holds it
// then (the waiter, or a thread unlocking on its behalf), between annotations TSan never saw.
// Wrapped, each evaluation acquires the mutex's clock first and releases it after, as the
// critical section it is.
struct AnnotatedCondition {
  const void* mu;
  const absl::Condition* cond;
};

bool EvalAnnotated(void* arg) {
  const auto* a = static_cast<const AnnotatedCondition*>(arg);
  Acquire(a->mu);
  const bool result = a->cond->Eval();
  Release(a->mu);
  return result;
}

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

// Mutex: acquire after every way of taking it, release before every way of giving it up.
// Readers and writers share one clock: reader-to-reader edges only hide read-read pairs,
// which are never races.

void Mutex::Lock() {
  static auto* real = NextFn<void (*)(Mutex*)>(false, "5Mutex4LockEv");
  real(this);
  Acquire(this);
}

void Mutex::ReaderLock() {
  static auto* real = NextFn<void (*)(Mutex*)>(false, "5Mutex10ReaderLockEv");
  real(this);
  Acquire(this);
}

bool Mutex::TryLock() {
  static auto* real = NextFn<bool (*)(Mutex*)>(false, "5Mutex7TryLockEv");
  const bool locked = real(this);
  if (locked) Acquire(this);
  return locked;
}

bool Mutex::ReaderTryLock() {
  static auto* real = NextFn<bool (*)(Mutex*)>(false, "5Mutex13ReaderTryLockEv");
  const bool locked = real(this);
  if (locked) Acquire(this);
  return locked;
}

void Mutex::Unlock() {
  static auto* real = NextFn<void (*)(Mutex*)>(false, "5Mutex6UnlockEv");
  Release(this);
  real(this);
}

void Mutex::ReaderUnlock() {
  static auto* real = NextFn<void (*)(Mutex*)>(false, "5Mutex12ReaderUnlockEv");
  Release(this);
  real(this);
}

// The *When functions return holding the lock whether or not the condition became true.
void Mutex::LockWhen(const Condition& cond) {
  static auto* real =
      NextFn<void (*)(Mutex*, const Condition&)>(false, "5Mutex8LockWhenERKNS0_9ConditionE");
  AnnotatedCondition annotated{this, &cond};
  real(this, Condition(&EvalAnnotated, &annotated));
  Acquire(this);
}

void Mutex::ReaderLockWhen(const Condition& cond) {
  static auto* real =
      NextFn<void (*)(Mutex*, const Condition&)>(false, "5Mutex14ReaderLockWhenERKNS0_9ConditionE");
  AnnotatedCondition annotated{this, &cond};
  real(this, Condition(&EvalAnnotated, &annotated));
  Acquire(this);
}

bool Mutex::LockWhenWithTimeout(const Condition& cond, absl::Duration timeout) {
  static auto* real = NextFn<bool (*)(Mutex*, const Condition&, absl::Duration)>(
      false, "5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  AnnotatedCondition annotated{this, &cond};
  const bool result = real(this, Condition(&EvalAnnotated, &annotated), timeout);
  Acquire(this);
  return result;
}

bool Mutex::ReaderLockWhenWithTimeout(const Condition& cond, absl::Duration timeout) {
  static auto* real = NextFn<bool (*)(Mutex*, const Condition&, absl::Duration)>(
      false, "5Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  AnnotatedCondition annotated{this, &cond};
  const bool result = real(this, Condition(&EvalAnnotated, &annotated), timeout);
  Acquire(this);
  return result;
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, absl::Time deadline) {
  static auto* real = NextFn<bool (*)(Mutex*, const Condition&, absl::Time)>(
      false, "5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  AnnotatedCondition annotated{this, &cond};
  const bool result = real(this, Condition(&EvalAnnotated, &annotated), deadline);
  Acquire(this);
  return result;
}

bool Mutex::ReaderLockWhenWithDeadline(const Condition& cond, absl::Time deadline) {
  static auto* real = NextFn<bool (*)(Mutex*, const Condition&, absl::Time)>(
      false, "5Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  AnnotatedCondition annotated{this, &cond};
  const bool result = real(this, Condition(&EvalAnnotated, &annotated), deadline);
  Acquire(this);
  return result;
}

// Await gives the lock up while it waits and takes it back before returning.
void Mutex::Await(const Condition& cond) {
  static auto* real =
      NextFn<void (*)(Mutex*, const Condition&)>(false, "5Mutex5AwaitERKNS0_9ConditionE");
  Release(this);
  AnnotatedCondition annotated{this, &cond};
  real(this, Condition(&EvalAnnotated, &annotated));
  Acquire(this);
}

bool Mutex::AwaitWithTimeout(const Condition& cond, absl::Duration timeout) {
  static auto* real = NextFn<bool (*)(Mutex*, const Condition&, absl::Duration)>(
      false, "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  Release(this);
  AnnotatedCondition annotated{this, &cond};
  const bool result = real(this, Condition(&EvalAnnotated, &annotated), timeout);
  Acquire(this);
  return result;
}

bool Mutex::AwaitWithDeadline(const Condition& cond, absl::Time deadline) {
  static auto* real = NextFn<bool (*)(Mutex*, const Condition&, absl::Time)>(
      false, "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  Release(this);
  AnnotatedCondition annotated{this, &cond};
  const bool result = real(this, Condition(&EvalAnnotated, &annotated), deadline);
  Acquire(this);
  return result;
}

// CondVar: waiting gives `mu` up and takes it back.
void CondVar::Wait(Mutex* mu) {
  static auto* real = NextFn<void (*)(CondVar*, Mutex*)>(false, "7CondVar4WaitEPNS0_5MutexE");
  Release(mu);
  real(this, mu);
  Acquire(mu);
}

bool CondVar::WaitWithTimeout(Mutex* mu, absl::Duration timeout) {
  static auto* real = NextFn<bool (*)(CondVar*, Mutex*, absl::Duration)>(
      false, "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  Release(mu);
  const bool result = real(this, mu, timeout);
  Acquire(mu);
  return result;
}

bool CondVar::WaitWithDeadline(Mutex* mu, absl::Time deadline) {
  static auto* real = NextFn<bool (*)(CondVar*, Mutex*, absl::Time)>(
      false, "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  Release(mu);
  const bool result = real(this, mu, deadline);
  Acquire(mu);
  return result;
}

// Notification: HasBeenNotified() is inline (an instrumented acquire load of notified_yet_),
// and the waits return early on the library's own uninstrumented load of it; so Notify
// releases on the flag's address and every wait that saw it set acquires from there.
void Notification::Notify() {
  static auto* real = NextFn<void (*)(Notification*)>(false, "12Notification6NotifyEv");
  Release(&notified_yet_);
  real(this);
}

void Notification::WaitForNotification() const {
  static auto* real =
      NextFn<void (*)(const Notification*)>(true, "12Notification19WaitForNotificationEv");
  real(this);
  Acquire(&notified_yet_);
}

bool Notification::WaitForNotificationWithTimeout(absl::Duration timeout) const {
  static auto* real = NextFn<bool (*)(const Notification*, absl::Duration)>(
      true, "12Notification30WaitForNotificationWithTimeoutENS0_8DurationE");
  const bool notified = real(this, timeout);
  if (notified) Acquire(&notified_yet_);
  return notified;
}

bool Notification::WaitForNotificationWithDeadline(absl::Time deadline) const {
  static auto* real = NextFn<bool (*)(const Notification*, absl::Time)>(
      true, "12Notification31WaitForNotificationWithDeadlineENS0_4TimeE");
  const bool notified = real(this, deadline);
  if (notified) Acquire(&notified_yet_);
  return notified;
}

ABSL_NAMESPACE_END
}  // namespace absl
