// CheckDeviceUsable: refuses a --device this binary cannot run on, before anything starts.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace kvserve::model {

// Whether `device_flag` ("cpu", "cuda", "cuda:N") names a device this binary can compute on.
// OK for the CPU and for a visible CUDA device. Otherwise InvalidArgument (not a device, or a
// device type kvserve does not run on) or FailedPrecondition (a CUDA device on a build without
// CUDA, no visible GPU, index out of range), as one line that starts with the flag and names
// the build, e.g. "--device cuda:0: this binary was built without CUDA (LibTorch 1.13.0, CPU
// only)". May initialize the CUDA runtime; call from the main thread before serving.
absl::Status CheckDeviceUsable(const std::string& device_flag);

}  // namespace kvserve::model
