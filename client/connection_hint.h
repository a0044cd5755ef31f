// What most likely went wrong when a call could not reach a kvserve server: gRPC reports a
// plaintext client on a TLS port, a missing client certificate and an untrusted one alike
// (UNAVAILABLE "... Socket closed"), but the client knows how its own channel was secured.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace kvserve::client {

// How a client's channel is secured, as far as explaining a failed connection needs.
enum class ChannelMode {
  kUnknown,    // a channel the client was given: no hint
  kPlaintext,  // no CA
  kTls,        // a CA verifying the server, no client certificate
  kMutualTls,  // a CA and a client certificate
};

// A sentence saying what most likely happened when `status` is gRPC's report of a connection
// that could not be established (UNAVAILABLE "failed to connect ..." naming a closed socket, or
// a failed TLS handshake), given how the channel was secured; it names the flags kvctl and the
// Python examples share (--tls-ca-file, --tls-cert-file, --tls-key-file, --tls-server-name).
// Empty for any other status (the server's own errors, a refused connection, a connection
// dropped during a call, a deadline) and for kUnknown.
std::string ConnectionFailureHint(const absl::Status& status, ChannelMode mode);

// `status` with ConnectionFailureHint(status, mode) appended to its message after " -- ";
// `status` itself when there is no hint.
absl::Status WithConnectionFailureHint(const absl::Status& status, ChannelMode mode);

}  // namespace kvserve::client
