// Tests of ToGrpcStatus: every absl code becomes the gRPC code of the same number, message kept.
#include "server/grpc_api/status_mapping.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace kvserve::server::grpc_api {
namespace {

TEST(StatusMappingTest, OkMapsToOkWithoutMessage) {
  const grpc::Status status = ToGrpcStatus(absl::OkStatus());
  EXPECT_TRUE(status.ok());
  EXPECT_EQ(status.error_code(), grpc::StatusCode::OK);
  EXPECT_EQ(status.error_message(), "");
}

TEST(StatusMappingTest, EveryErrorCodeKeepsItsNumberAndMessage) {
  const std::vector<std::pair<absl::StatusCode, grpc::StatusCode>> codes = {
      {absl::StatusCode::kCancelled, grpc::StatusCode::CANCELLED},
      {absl::StatusCode::kUnknown, grpc::StatusCode::UNKNOWN},
      {absl::StatusCode::kInvalidArgument, grpc::StatusCode::INVALID_ARGUMENT},
      {absl::StatusCode::kDeadlineExceeded, grpc::StatusCode::DEADLINE_EXCEEDED},
      {absl::StatusCode::kNotFound, grpc::StatusCode::NOT_FOUND},
      {absl::StatusCode::kAlreadyExists, grpc::StatusCode::ALREADY_EXISTS},
      {absl::StatusCode::kPermissionDenied, grpc::StatusCode::PERMISSION_DENIED},
      {absl::StatusCode::kResourceExhausted, grpc::StatusCode::RESOURCE_EXHAUSTED},
      {absl::StatusCode::kFailedPrecondition, grpc::StatusCode::FAILED_PRECONDITION},
      {absl::StatusCode::kAborted, grpc::StatusCode::ABORTED},
      {absl::StatusCode::kOutOfRange, grpc::StatusCode::OUT_OF_RANGE},
      {absl::StatusCode::kUnimplemented, grpc::StatusCode::UNIMPLEMENTED},
      {absl::StatusCode::kInternal, grpc::StatusCode::INTERNAL},
      {absl::StatusCode::kUnavailable, grpc::StatusCode::UNAVAILABLE},
      {absl::StatusCode::kDataLoss, grpc::StatusCode::DATA_LOSS},
      {absl::StatusCode::kUnauthenticated, grpc::StatusCode::UNAUTHENTICATED},
  };
  for (const auto& [absl_code, grpc_code] : codes) {
    const std::string message = "failure number " + std::to_string(static_cast<int>(absl_code));
    const grpc::Status status = ToGrpcStatus(absl::Status(absl_code, message));
    EXPECT_EQ(status.error_code(), grpc_code) << message;
    EXPECT_EQ(static_cast<int>(status.error_code()), static_cast<int>(absl_code));
    EXPECT_EQ(status.error_message(), message);
  }
}

TEST(StatusMappingTest, CodeOutsideGrpcRangeBecomesUnknown) {
  const grpc::Status status = ToGrpcStatus(absl::Status(static_cast<absl::StatusCode>(42), "odd"));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNKNOWN);
  EXPECT_EQ(status.error_message(), "odd");
}

TEST(StatusMappingTest, LongMessagesAreCutOnACharacterBoundary) {
  // 1023 ASCII bytes, then a 2-byte character that straddles the 1 KiB mark.
  const std::string message = std::string(1023, 'a') + "\xc3\xa9" + std::string(5000, 'b');
  const grpc::Status status = ToGrpcStatus(absl::InvalidArgumentError(message));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), std::string(1023, 'a') + "... (message cut)");
  const std::string short_message(1024, 'c');
  EXPECT_EQ(ToGrpcStatus(absl::InternalError(short_message)).error_message(), short_message);
}

}  // namespace
}  // namespace kvserve::server::grpc_api
