// The tenant a verified client certificate names: its subject's one CN.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace kvserve::server {

// The subject CN of the PEM certificate `pem` (the peer's, as gRPC reports it). Unauthenticated
// saying why when `pem` holds no certificate, or its subject has no CN or more than one (a
// second CN must not be ignored: which one names the tenant would be a guess).
absl::StatusOr<std::string> SubjectCommonName(std::string_view pem);

}  // namespace kvserve::server
