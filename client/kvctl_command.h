// kvctl's command table entries and what every command shares: the global flags' values, the
// exit codes and how flag and RPC errors are reported.
#pragma once

#include <iostream>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/command_line.h"
#include "client/client.h"
#include "client/flags.h"

namespace kvserve::client {

inline constexpr int kExitOk = 0;
inline constexpr int kExitRpcError = 1;  // also: not SERVING
inline constexpr int kExitBadFlags = 2;
// generate and stream: the server ended the generation early (finish_reason CANCELLED: it was
// shutting down and its grace period ran out), so the output is partial. Distinct from 0 so
// that scripts do not take a cut-off answer for a whole one.
inline constexpr int kExitCancelled = 3;

// The environment variable that holds the API key when --api-key is not given.
inline constexpr char kApiKeyEnvironmentVariable[] = "KVSERVE_API_KEY";

// What every command takes: where to connect, the per-call deadline and routing key, the
// output format.
struct Globals {
  std::string target;  // "host:port", "[ipv6]:port" or one of gRPC's forms ("unix:path")
  // --tls-ca-file, --tls-cert-file, --tls-key-file (read), --tls-server-name; api_key from
  // --api-key or $KVSERVE_API_KEY.
  ChannelSecurity security{};
  CallOptions call;   // applied to each call
  bool json = false;  // --output json: proto3 JSON instead of text
};

// The flags every command takes (--target, --timeout-ms, --output, --route, the TLS flags and
// --api-key), before or after the command's name.
std::vector<base::FlagSpec> GlobalFlagSpecs();

// The global flags' values from a command's parsed flags. The routing key is --route when
// given (`--route=` sends none), else the command's --prefix, else its --name (prefix
// register/get/delete), so that a prefix's registration and the requests naming it reach the
// same replica; else none. The TLS flags' files are read here. The API key is --api-key when
// given (`--api-key=` sends none), else kApiKeyEnvironmentVariable when set and not empty,
// else none. InvalidArgument naming the flag (or the variable) for a malformed value (a --target
// without a port or given as a URL included), a file that cannot be read or an API key that
// cannot travel as metadata (not printable ASCII).
absl::StatusOr<Globals> ParseGlobals(const ParsedFlags& flags);

// A client of globals.target secured by globals.security (its API key on every call).
std::unique_ptr<Client> Connect(const Globals& globals);

// A command's body: runs with its flags parsed against its specs and returns the exit code.
using RunFn = int (*)(const Globals&, const ParsedFlags&);

// One kvctl command.
struct Command {
  std::string name;                     // as typed: "generate", "register"
  std::string summary;                  // one line for --help
  std::vector<base::FlagSpec> specs;    // its own flags (kvctl adds the global ones)
  std::vector<std::string> repeatable;  // those of `specs` that may be given several times
  RunFn run;
  // Names of its positional arguments, in order, as --help shows them ("ID", "N"); they land
  // in ParsedFlags::arguments. Empty (default): none is accepted.
  std::vector<std::string> arguments = {};
  // More of --help, printed after the flags (lines ending in a newline); empty (default): none.
  std::string details = {};
};

// Commands under one name, chosen by the word after it: `kvctl prefix register`.
struct CommandGroup {
  std::string name;               // "prefix"
  std::string summary;            // one line for --help
  std::vector<Command> commands;  // named by the word after the group's name
};

// Writes "kvctl: CODE: message" to `err`; returns kExitRpcError.
int RpcError(const absl::Status& status, std::ostream& err = std::cerr);

// Writes "kvctl COMMAND: message (see kvctl COMMAND --help)" to `err`; returns kExitBadFlags.
// `command` is the full name ("prefix register").
int BadFlags(const std::string& command, const absl::Status& status, std::ostream& err = std::cerr);

}  // namespace kvserve::client
