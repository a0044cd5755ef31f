// Hints for connections that failed in or after the TLS handshake (see connection_hint.h).
#include "client/connection_hint.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace kvserve::client {
namespace {

// gRPC's words for a connection that was never established because the peer closed it: what a
// client sees when the server ends a handshake it does not accept. A server that refuses a
// client certificate (or its absence) does so after the client's side of the TLS 1.3 handshake
// is done, so the client sees only the closed socket. A connection that drops during a call
// ("Socket closed" alone: a server killed, a proxy restarting) says nothing about TLS.
bool SaysClosedWhileConnecting(absl::string_view message) {
  if (!absl::StrContains(message, "failed to connect to all addresses") &&
      !absl::StrContains(message, "connections to all backends failing")) {
    return false;
  }
  for (const char* words :
       {"Socket closed", "Connection reset by peer", "Broken pipe", "Handshake read failed"}) {
    if (absl::StrContains(message, words)) return true;
  }
  return false;
}

// The client's own TLS checks of the server's certificate failed (OpenSSL's words, then
// BoringSSL's).
bool SaysServerCertificateRefused(absl::string_view message) {
  return absl::StrContains(message, "certificate verify failed") ||
         absl::StrContains(message, "CERTIFICATE_VERIFY_FAILED");
}

// What came back to the client's TLS hello was no TLS record: a plaintext server.
bool SaysNotTls(absl::string_view message) {
  return absl::StrContains(message, "wrong version number") ||
         absl::StrContains(message, "WRONG_VERSION_NUMBER");
}

bool SaysServerNameMismatch(absl::string_view message) {
  return absl::StrContains(message, "is not in peer certificate");
}

}  // namespace

std::string ConnectionFailureHint(const absl::Status& status, ChannelMode mode) {
  if (!absl::IsUnavailable(status) || mode == ChannelMode::kUnknown) return "";
  const absl::string_view message = status.message();
  if (mode != ChannelMode::kPlaintext && SaysServerNameMismatch(message)) {
    return "the server's certificate does not name the --target host: give the name it carries "
           "as --tls-server-name";
  }
  if (mode != ChannelMode::kPlaintext && SaysServerCertificateRefused(message)) {
    return "the server's certificate is not signed by a CA of --tls-ca-file (or has expired)";
  }
  if (mode != ChannelMode::kPlaintext && SaysNotTls(message)) {
    return "the server does not serve TLS on this port (it answered in plaintext): leave out "
           "the --tls-* flags";
  }
  if (!SaysClosedWhileConnecting(message)) return "";
  switch (mode) {
    case ChannelMode::kPlaintext:
      return "most likely the server requires TLS and this client spoke plaintext: give "
             "--tls-ca-file (and --tls-cert-file, --tls-key-file where it requires client "
             "certificates)";
    case ChannelMode::kTls:
      return "most likely the server requires a client certificate (mutual TLS): give "
             "--tls-cert-file and --tls-key-file";
    case ChannelMode::kMutualTls:
      return "most likely the server does not trust the client certificate: the CA that signed "
             "--tls-cert-file is not among its --tls-client-ca-file";
    case ChannelMode::kUnknown:
      break;
  }
  return "";
}

absl::Status WithConnectionFailureHint(const absl::Status& status, ChannelMode mode) {
  const std::string hint = ConnectionFailureHint(status, mode);
  if (hint.empty()) return status;
  return absl::Status(status.code(), absl::StrCat(status.message(), " -- ", hint));
}

}  // namespace kvserve::client
