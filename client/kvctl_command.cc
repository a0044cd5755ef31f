// What kvctl's commands share (see kvctl_command.h).
#include "client/kvctl_command.h"

namespace kvserve::client {

int RpcError(const absl::Status& status, std::ostream& err) {
  err << "kvctl: " << absl::StatusCodeToString(status.code()) << ": " << status.message()
      << std::endl;
  return kExitRpcError;
}

int BadFlags(const std::string& command, const absl::Status& status, std::ostream& err) {
  err << "kvctl " << command << ": " << status.message() << " (see kvctl " << command << " --help)"
      << std::endl;
  return kExitBadFlags;
}

}  // namespace kvserve::client
