// What kvctl's commands share (see kvctl_command.h).
#include "client/kvctl_command.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace kvserve::client {
namespace {

// The contents of `path`, named by --`flag`: InvalidArgument naming both when it cannot be
// read, is empty or is not PEM.
absl::StatusOr<std::string> ReadFlagFile(const std::string& flag, const std::string& path) {
  const auto refuse = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, " '", path, "': ", why));
  };
  std::ifstream in(path, std::ios::binary);
  if (!in) return refuse(absl::StrCat("cannot read it: ", std::strerror(errno)));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return refuse(absl::StrCat("cannot read it: ", std::strerror(errno)));
  if (text.str().find("-----BEGIN ") == std::string::npos) {
    return refuse("is not PEM (no -----BEGIN line)");
  }
  return text.str();
}

// OK when `key` (named `source` in errors) can travel as gRPC metadata: printable ASCII
// without leading or trailing spaces. The message never quotes the key, a secret.
absl::Status CheckApiKey(const std::string& source, const std::string& key) {
  for (const char c : key) {
    if (c < 0x20 || c > 0x7e) {
      return absl::InvalidArgumentError(
          absl::StrCat(source,
                       ": the API key must be printable ASCII (no control characters, "
                       "newlines or non-ASCII bytes)"));
    }
  }
  if (!key.empty() && (key.front() == ' ' || key.back() == ' ')) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": the API key must not begin or end with a space"));
  }
  return absl::OkStatus();
}

// OK when `target` is an address gRPC can dial: HOST:PORT, [IPV6]:PORT, or one of gRPC's own
// forms (unix:PATH, unix-abstract:NAME, dns:, ipv4:, ipv6:). Else InvalidArgument naming
// --target: gRPC would dial port 0 for a missing port, and take "http://host:port" for a DNS name,
// both failing later with errors that do not say why.
absl::Status CheckTarget(const std::string& target) {
  const auto refuse = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("--target '", target, "': ", why));
  };
  if (target.empty()) return refuse("empty (give HOST:PORT, e.g. 127.0.0.1:50051)");
  for (const char* scheme : {"unix:", "unix-abstract:", "dns:", "ipv4:", "ipv6:"}) {
    if (absl::StartsWith(target, scheme)) {
      if (target.size() == std::strlen(scheme)) return refuse("no address after the scheme");
      return absl::OkStatus();
    }
  }
  if (target.find("://") != std::string::npos) {
    return refuse(
        "give HOST:PORT, not a URL (kvctl speaks gRPC; --tls-ca-file makes the channel TLS)");
  }
  std::string host;
  std::string port;
  if (absl::StartsWith(target, "[")) {
    const size_t close = target.find(']');
    if (close == std::string::npos) return refuse("no ']' after the IPv6 address");
    if (target.compare(close + 1, 1, ":") != 0) {
      return refuse("no port (give [IPV6]:PORT, e.g. [::1]:50051)");
    }
    host = target.substr(1, close - 1);
    port = target.substr(close + 2);
  } else {
    const size_t colon = target.rfind(':');
    if (colon == std::string::npos) return refuse("no port (give HOST:PORT, e.g. 127.0.0.1:50051)");
    host = target.substr(0, colon);
    port = target.substr(colon + 1);
    if (host.find(':') != std::string::npos) {
      return refuse("an IPv6 address goes in brackets: [IPV6]:PORT, e.g. [::1]:50051");
    }
  }
  if (host.empty()) return refuse("no host (give HOST:PORT, e.g. 127.0.0.1:50051)");
  int port_number = 0;
  if (port.empty() || !std::all_of(port.begin(), port.end(), absl::ascii_isdigit) ||
      !absl::SimpleAtoi(port, &port_number) || port_number < 1 || port_number > 65535) {
    return refuse(absl::StrCat("the port '", port, "' is not a number in [1, 65535]"));
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<base::FlagSpec> GlobalFlagSpecs() {
  return {
      {"target", "server (or gateway) address HOST:PORT, [IPV6]:PORT or unix:PATH",
       "127.0.0.1:50051"},
      {"timeout-ms", "deadline of each call in milliseconds", "none"},
      {"output", "text or json (proto3 JSON mapping)", "text"},
      {"route", "routing key sent as x-kvserve-route metadata (a gateway hashes it to a replica)",
       "--prefix or --name"},
      {"tls-ca-file", "CA certificates (PEM) verifying the server; with it the channel is TLS",
       "none: plaintext"},
      {"tls-cert-file", "client certificate chain (PEM) for mutual TLS; needs --tls-ca-file",
       "none"},
      {"tls-key-file", "private key (PEM) of --tls-cert-file", "none"},
      {"tls-server-name", "name the server's certificate must carry", "the --target host"},
      {"api-key",
       "API key sent on every call as 'authorization: Bearer KEY' metadata (kvserve "
       "--api-keys-file); the flag shows in the process list, so prefer $KVSERVE_API_KEY; "
       "--api-key= sends none",
       "$KVSERVE_API_KEY when set and not empty, else none"},
  };
}

absl::StatusOr<Globals> ParseGlobals(const ParsedFlags& flags) {
  Globals globals;
  globals.target = flags.flags.GetString("target", "127.0.0.1:50051");
  if (absl::Status ok = CheckTarget(globals.target); !ok.ok()) return ok;
  const std::string output = flags.flags.GetString("output", "text");
  if (output != "text" && output != "json") {
    return absl::InvalidArgumentError("--output must be text or json");
  }
  globals.json = output == "json";
  absl::StatusOr<std::optional<int64_t>> timeout_ms = flags.GetInt64("timeout-ms");
  if (!timeout_ms.ok()) return timeout_ms.status();
  if (timeout_ms->has_value()) {
    if (**timeout_ms <= 0) return absl::InvalidArgumentError("--timeout-ms must be > 0");
    globals.call.timeout = absl::Milliseconds(**timeout_ms);
  }
  if (flags.flags.Has("route")) {
    globals.call.route = flags.flags.GetString("route");
  } else if (const std::string prefix = flags.flags.GetString("prefix"); !prefix.empty()) {
    globals.call.route = prefix;
  } else {
    globals.call.route = flags.flags.GetString("name");
  }
  for (const auto& [flag, field] : {std::pair{"tls-ca-file", &globals.security.ca_pem},
                                    std::pair{"tls-cert-file", &globals.security.cert_pem},
                                    std::pair{"tls-key-file", &globals.security.key_pem}}) {
    if (!flags.flags.Has(flag)) continue;
    absl::StatusOr<std::string> text = ReadFlagFile(flag, flags.flags.GetString(flag));
    if (!text.ok()) return text.status();
    *field = *std::move(text);
  }
  globals.security.server_name = flags.flags.GetString("tls-server-name", "");
  const ChannelSecurity& security = globals.security;
  if (security.cert_pem.empty() != security.key_pem.empty()) {
    return absl::InvalidArgumentError(
        "--tls-cert-file and --tls-key-file go together (both or neither)");
  }
  if (!security.cert_pem.empty() && !security.tls()) {
    return absl::InvalidArgumentError(
        "--tls-cert-file needs --tls-ca-file (a client certificate is sent over TLS only)");
  }
  if (!security.server_name.empty() && !security.tls()) {
    return absl::InvalidArgumentError("--tls-server-name needs --tls-ca-file");
  }
  if (flags.flags.Has("api-key")) {
    globals.security.api_key = flags.flags.GetString("api-key");
    if (absl::Status ok = CheckApiKey("--api-key", globals.security.api_key); !ok.ok()) return ok;
  } else if (const char* env = std::getenv(kApiKeyEnvironmentVariable);
             env != nullptr && *env != '\0') {
    globals.security.api_key = env;
    if (absl::Status ok = CheckApiKey(kApiKeyEnvironmentVariable, globals.security.api_key);
        !ok.ok()) {
      return ok;
    }
  }
  return globals;
}

std::unique_ptr<Client> Connect(const Globals& globals) {
  return Client::Connect(globals.target, globals.security);
}

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
