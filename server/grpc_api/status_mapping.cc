// ToGrpcStatus: absl::Status to grpc::Status.
#include "server/grpc_api/status_mapping.h"

#include <string>
#include <string_view>

namespace kvserve::server::grpc_api {
namespace {

// gRPC sends the message as percent-encoded trailing metadata, which clients refuse beyond
// their metadata limit (8 KiB by default, and the channel's next call fails too); 1 KiB even
// fully percent-encoded stays far below it.
constexpr size_t kMaxMessageBytes = 1024;

std::string Bounded(absl::string_view message) {
  if (message.size() <= kMaxMessageBytes) return std::string(message);
  size_t cut = kMaxMessageBytes;
  // Back to the start of a UTF-8 character.
  while (cut > 0 && (static_cast<unsigned char>(message[cut]) & 0xC0) == 0x80) --cut;
  return std::string(message.substr(0, cut)) + "... (message cut)";
}

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // absl::StatusCode and grpc::StatusCode share their numbering (both follow
  // google.rpc.Code), so the cast keeps the meaning; anything unknown becomes UNKNOWN.
  const int code = static_cast<int>(status.code());
  const grpc::StatusCode grpc_code = (code > 0 && code <= grpc::StatusCode::UNAUTHENTICATED)
                                         ? static_cast<grpc::StatusCode>(code)
                                         : grpc::StatusCode::UNKNOWN;
  return grpc::Status(grpc_code, Bounded(status.message()));
}

}  // namespace kvserve::server::grpc_api
