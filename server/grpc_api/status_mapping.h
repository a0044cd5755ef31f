// ToGrpcStatus: the one place where an absl::Status becomes the grpc::Status a client sees.
#pragma once

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace kvserve::server::grpc_api {

// Same code (absl's codes are gRPC's, number for number) and message, the message cut to
// 1 KiB so that it always fits gRPC's metadata limit. OK maps to OK.
grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace kvserve::server::grpc_api
