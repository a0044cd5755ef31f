// kvctl --version: which build of kvctl this is.
#pragma once

#include <string>

namespace kvserve::client {

// Two lines: "kvctl VERSION (git REVISION)", the project's version and the commit it was built
// from ("unknown" outside a git checkout, "-dirty" after it when tracked files differed from
// it), then what it links instead of the server's LibTorch and CUDA: "client: no LibTorch, no
// CUDA (gRPC V, protobuf V)".
std::string KvctlVersionText();

}  // namespace kvserve::client
