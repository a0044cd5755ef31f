// ToGrpcStatus: absl::Status to grpc::Status.
#include "server/status_mapping.h"

#include <string>

namespace kvserve::server {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // absl::StatusCode and grpc::StatusCode share their numbering (both follow
  // google.rpc.Code), so the cast keeps the meaning; anything unknown becomes UNKNOWN.
  const int code = static_cast<int>(status.code());
  const grpc::StatusCode grpc_code = (code > 0 && code <= grpc::StatusCode::UNAUTHENTICATED)
                                         ? static_cast<grpc::StatusCode>(code)
                                         : grpc::StatusCode::UNKNOWN;
  return grpc::Status(grpc_code, std::string(status.message()));
}

}  // namespace kvserve::server
