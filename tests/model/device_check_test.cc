// Tests for CheckDeviceUsable: --device values this build cannot run on are refused up front.
#include "model/device_check.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cache/torch_compat.h"

namespace kvserve::model {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

TEST(DeviceCheckTest, CpuIsAlwaysUsable) {
  EXPECT_TRUE(CheckDeviceUsable("cpu").ok());
  EXPECT_TRUE(CheckDeviceUsable("cpu:0").ok());
}

TEST(DeviceCheckTest, RefusesWhatIsNotADevice) {
  for (const char* flag : {"gpu", "cuda:x", "", "cuda:-1"}) {
    const absl::Status status = CheckDeviceUsable(flag);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << flag;
    EXPECT_THAT(std::string(status.message()), StartsWith(std::string("--device ") + flag + ":"));
  }
}

TEST(DeviceCheckTest, RefusesDeviceTypesKvserveDoesNotRunOn) {
  const absl::Status status = CheckDeviceUsable("meta");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("cpu or cuda[:N]"));
}

TEST(DeviceCheckTest, BuildDescriptionNamesLibTorchAndCuda) {
  const std::string build = compat::BuildDescription();
  EXPECT_THAT(build, StartsWith("LibTorch " TORCH_VERSION));
  EXPECT_THAT(build, HasSubstr(compat::kWithCuda ? ", CUDA " : ", CPU only"));
}

TEST(DeviceCheckTest, CudaWithoutCudaBuildNamesTheBuildOnOneLine) {
  if (compat::kWithCuda) GTEST_SKIP() << "built with CUDA";
  for (const char* flag : {"cuda", "cuda:0", "cuda:3"}) {
    const absl::Status status = CheckDeviceUsable(flag);
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << flag;
    const std::string message(status.message());
    EXPECT_EQ(message, std::string("--device ") + flag + ": this binary was built without CUDA (" +
                           compat::BuildDescription() +
                           "); use --device cpu or an image built with CUDA");
    EXPECT_THAT(message, Not(HasSubstr("\n")));
  }
}

TEST(DeviceCheckTest, CudaBuildAcceptsVisibleDevicesAndRefusesOthersWithTheReason) {
  if (!compat::kWithCuda) GTEST_SKIP() << "built without CUDA";
  const compat::CudaDevices visible = compat::VisibleCudaDevices();
  if (visible.count == 0) {
    const absl::Status status = CheckDeviceUsable("cuda:0");
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(status.message()), HasSubstr(visible.reason));
    EXPECT_THAT(std::string(status.message()), HasSubstr(compat::BuildDescription()));
    return;
  }
  EXPECT_TRUE(CheckDeviceUsable("cuda").ok());
  EXPECT_TRUE(CheckDeviceUsable("cuda:0").ok());
  const std::string past_end = "cuda:" + std::to_string(visible.count);
  const absl::Status status = CheckDeviceUsable(past_end);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("cuda:0 to cuda:" + std::to_string(visible.count - 1)));
}

}  // namespace
}  // namespace kvserve::model
