// Attached: what a gRPC service serves once the model is loaded (the services bind before
// loading, so that health can answer); until then its calls are UNAVAILABLE.
#pragma once

#include <memory>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace kvserve::server::grpc_api {

// The error every call gets before the model is attached.
inline absl::Status ModelLoadingError() {
  return absl::UnavailableError("the model is still loading; retry");
}

// Thread-safe. `T` is a plain struct of what the service needs (pointers it does not own).
template <typename T>
class Attached {
 public:
  // Makes `value` what get() returns from now on. Call once.
  void Attach(T value) {
    absl::MutexLock lock(&mu_);
    value_ = std::make_unique<const T>(std::move(value));
  }
  // The attached value, or null while the model loads.
  const T* get() const {
    absl::MutexLock lock(&mu_);
    return value_.get();
  }

 private:
  mutable absl::Mutex mu_;
  std::unique_ptr<const T> value_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvserve::server::grpc_api
