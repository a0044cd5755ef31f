// What kvctl's commands share (see kvctl_command.h).
#include "client/kvctl_command.h"

#include <cstdint>
#include <optional>

#include "absl/time/time.h"

namespace kvserve::client {

std::vector<cli::FlagSpec> GlobalFlagSpecs() {
  return {
      {"target", "server (or gateway) address HOST:PORT", "127.0.0.1:50051"},
      {"timeout-ms", "deadline of each call in milliseconds", "none"},
      {"output", "text or json (proto3 JSON mapping)", "text"},
      {"route", "routing key sent as x-kvserve-route metadata (a gateway hashes it to a replica)",
       "--prefix or --name"},
  };
}

absl::StatusOr<Globals> ParseGlobals(const ParsedFlags& flags) {
  Globals globals;
  globals.target = flags.flags.GetString("target", "127.0.0.1:50051");
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
  return globals;
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
