// kvctl prefix: register, get, list and delete named prefixes (kvserve.v1.PrefixCache); the
// mapping of `register`'s flags onto a RegisterPrefixRequest and each subcommand's body.
#pragma once

#include <iostream>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/command_line.h"
#include "client/flags.h"
#include "client/kvctl_command.h"
#include "kvserve/v1/prefix.pb.h"

namespace kvserve::client {

// The flags of `kvctl prefix register`.
std::vector<base::FlagSpec> PrefixRegisterFlagSpecs();

// Builds the request from flags parsed with PrefixRegisterFlagSpecs(). --name and exactly one of
// --text, --file (the file's whole content as the text; "-": `in`'s), --token-ids, --messages
// are required. `options` stays unset when none of --pinned, --ttl-seconds,
// --cache-implementation is given, and so does each option not given. A missing or malformed
// flag, or a --file that cannot be read (ReadTextInput), is InvalidArgument naming the flag (and
// the path); values are otherwise left for the server to validate.
absl::StatusOr<v1::RegisterPrefixRequest> BuildRegisterPrefixRequest(const ParsedFlags& flags,
                                                                     std::istream& in = std::cin);

// The value of --name; InvalidArgument naming --name when it is missing or empty.
absl::StatusOr<std::string> PrefixNameFlag(const ParsedFlags& flags);

// `kvctl prefix` and its commands (register, get, list, delete) for kvctl's command table;
// they print to stdout and stderr.
CommandGroup PrefixCommandGroup();

// The subcommands' bodies: call the server at globals.target with flags parsed against their
// specs, write the answer (text or JSON, by globals.json) to `out` and errors to `err`, and
// return the exit code (kExitOk, kExitRpcError or kExitBadFlags).
int RunPrefixRegister(const Globals& globals, const ParsedFlags& flags, std::ostream& out,
                      std::ostream& err);
int RunPrefixGet(const Globals& globals, const ParsedFlags& flags, std::ostream& out,
                 std::ostream& err);
int RunPrefixList(const Globals& globals, const ParsedFlags& flags, std::ostream& out,
                  std::ostream& err);
// Text output: "deleted NAME"; JSON: the (empty) DeletePrefixResponse.
int RunPrefixDelete(const Globals& globals, const ParsedFlags& flags, std::ostream& out,
                    std::ostream& err);

}  // namespace kvserve::client
