// kvctl --version (see kvctl_version.h).
#include "client/kvctl_version.h"

#include <google/protobuf/stubs/common.h>
#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "client/git_revision.h"  // generated at build time by client/git_revision.cmake

namespace kvserve::client {

std::string KvctlVersionText() {
  constexpr int kProtobuf = GOOGLE_PROTOBUF_VERSION;  // 3021012 is 3.21.12
  return absl::StrCat("kvctl ", KVSERVE_VERSION, " (git ", KVSERVE_GIT_REVISION,
                      ")\nclient: no LibTorch, no CUDA (gRPC ", grpc::Version(), ", protobuf ",
                      kProtobuf / 1000000, ".", kProtobuf / 1000 % 1000, ".", kProtobuf % 1000,
                      ")\n");
}

}  // namespace kvserve::client
