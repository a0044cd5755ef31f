// Refusal of unusable --device values (see device_check.h).
#include "model/device_check.h"

#include <c10/core/Device.h>
#include <c10/util/Exception.h>

#include <optional>

#include "absl/strings/str_cat.h"
#include "cache/torch_compat.h"

namespace kvserve::model {

absl::Status CheckDeviceUsable(const std::string& device_flag) {
  std::optional<c10::Device> device;
  try {
    device.emplace(device_flag);
  } catch (const c10::Error&) {
    return absl::InvalidArgumentError(
        absl::StrCat("--device ", device_flag, ": not a device (cpu, cuda or cuda:N)"));
  }
  if (device->is_cpu()) return absl::OkStatus();
  const std::string build = compat::BuildDescription();
  if (!device->is_cuda()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--device ", device_flag, ": kvserve runs on cpu or cuda[:N] only (", build, ")"));
  }
  if (!compat::kWithCuda) {
    return absl::FailedPreconditionError(
        absl::StrCat("--device ", device_flag, ": this binary was built without CUDA (", build,
                     "); use --device cpu or an image built with CUDA"));
  }
  const compat::CudaDevices visible = compat::VisibleCudaDevices();
  if (visible.count == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--device ", device_flag, ": no usable CUDA device (", visible.reason, "; ", build, ")"));
  }
  const int index = device->has_index() ? device->index() : 0;
  if (index >= visible.count) {
    return absl::FailedPreconditionError(
        absl::StrCat("--device ", device_flag, ": ", visible.count, " CUDA device",
                     visible.count == 1 ? " is" : "s are",
                     " visible (cuda:0 to cuda:", visible.count - 1, "; ", build, ")"));
  }
  return absl::OkStatus();
}

}  // namespace kvserve::model
