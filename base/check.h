// KVSERVE_CHECK / KVSERVE_DCHECK: abort on a broken invariant, naming where and why.
//
//   KVSERVE_CHECK(index < size) << "layer " << index << " of " << size;
//
// prints "file:line: KVSERVE_CHECK failed: index < size: layer 7 of 4" to stderr and aborts
// when the condition is false; the message is only built then. KVSERVE_DCHECK does the same in
// debug builds (NDEBUG not defined); otherwise neither the condition nor the message is
// evaluated, but both still compile.
//
// These are for what the program itself got wrong (a protocol between its own components, an
// index it computed). Input from a client, a flag or a model file is never checked this way:
// it is refused with an error status.
#pragma once

#include <cstddef>
#include <ostream>
#include <sstream>

namespace kvserve::base::internal {

// Collects the message of a failed check; its destructor prints it and aborts.
class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* condition);
  CheckFailure(const CheckFailure&) = delete;
  CheckFailure& operator=(const CheckFailure&) = delete;
  [[noreturn]] ~CheckFailure();

  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
  size_t header_size_ = 0;  // of "file:line: KVSERVE_CHECK failed: condition"
};

// Turns `stream << message` into a void expression, so that both branches of the macro's
// conditional have the same type. `&` binds more loosely than `<<` and more tightly than `?:`.
struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace kvserve::base::internal

#define KVSERVE_CHECK(condition)               \
  static_cast<bool>(condition)                 \
      ? static_cast<void>(0)                   \
      : ::kvserve::base::internal::Voidify() & \
            ::kvserve::base::internal::CheckFailure(__FILE__, __LINE__, #condition).stream()

#ifdef NDEBUG
// Never evaluated (the loop body never runs), but the condition and message are compiled.
#define KVSERVE_DCHECK(condition) \
  while (false) KVSERVE_CHECK(condition)
#else
#define KVSERVE_DCHECK(condition) KVSERVE_CHECK(condition)
#endif
