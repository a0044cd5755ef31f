// kvctl session: create, get, list, close and roll back chat sessions (kvserve.v1.Sessions);
// the mapping of `create`'s flags onto a CreateSessionRequest and each subcommand's body.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/command_line.h"
#include "client/flags.h"
#include "client/kvctl_command.h"
#include "kvserve/v1/session.pb.h"

namespace kvserve::client {

// The flags of `kvctl session create` (and of the sessions `kvctl chat` opens): the cache
// strategy flags of generate, --prefix and --ttl-seconds.
std::vector<base::FlagSpec> SessionCreateFlagSpecs();

// Builds the request from flags parsed against specs that include SessionCreateFlagSpecs().
// `options` stays unset when none of its flags is given, `options.cache` when none of the
// strategy flags is, and so does each optional field. A malformed value is InvalidArgument
// naming the flag; values are otherwise left for the server to validate.
absl::StatusOr<v1::CreateSessionRequest> BuildCreateSessionRequest(const ParsedFlags& flags);

// The session id, the first positional argument; InvalidArgument "the session ID is required"
// when there is none (or it is empty).
absl::StatusOr<std::string> SessionIdArgument(const ParsedFlags& flags);

// What `kvctl session rollback ID N` asks for.
struct RollbackArguments {
  std::string id;
  int32_t n = 0;  // tokens to drop; its range is for the server to check
};

// The session id and the number of tokens, the two positional arguments; InvalidArgument when
// either is missing, or naming N when it is not a 32-bit integer.
absl::StatusOr<RollbackArguments> ParseRollbackArguments(const ParsedFlags& flags);

// `kvctl session` and its commands (create, get, list, close, rollback) for kvctl's command
// table; they print to stdout and stderr.
CommandGroup SessionCommandGroup();

// The subcommands' bodies: call the server at globals.target with flags (and positional
// arguments) parsed against their specs, write the answer (text or JSON, by globals.json) to
// `out` and errors to `err`, and return the exit code (kExitOk, kExitRpcError or
// kExitBadFlags). create, get and rollback print the session (SessionText or its JSON).
int RunSessionCreate(const Globals& globals, const ParsedFlags& flags, std::ostream& out,
                     std::ostream& err);
int RunSessionGet(const Globals& globals, const ParsedFlags& flags, std::ostream& out,
                  std::ostream& err);
// Text output: SessionTableText; JSON: the ListSessionsResponse.
int RunSessionList(const Globals& globals, const ParsedFlags& flags, std::ostream& out,
                   std::ostream& err);
// Text output: "closed ID"; JSON: the (empty) CloseSessionResponse.
int RunSessionClose(const Globals& globals, const ParsedFlags& flags, std::ostream& out,
                    std::ostream& err);
int RunSessionRollback(const Globals& globals, const ParsedFlags& flags, std::ostream& out,
                       std::ostream& err);

}  // namespace kvserve::client
