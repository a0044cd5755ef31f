// kvctl session: the Sessions subcommands (see kvctl_session.h).
#include "client/kvctl_session.h"

#include <iostream>
#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "client/output.h"
#include "client/request_flags.h"

namespace kvserve::client {

std::vector<base::FlagSpec> SessionCreateFlagSpecs() {
  std::vector<base::FlagSpec> specs = CacheStrategyFlagSpecs();
  specs.push_back({"prefix", "name of a registered prefix the conversation starts with", ""});
  specs.push_back({"ttl-seconds", "closed this many seconds after its last use (0: the server's)",
                   "server: --session-ttl-seconds"});
  return specs;
}

absl::StatusOr<v1::CreateSessionRequest> BuildCreateSessionRequest(const ParsedFlags& flags) {
  v1::CreateSessionRequest request;
  absl::StatusOr<std::optional<v1::CacheOptions>> cache = BuildCacheOptions(flags);
  if (!cache.ok()) return cache.status();
  if (cache->has_value()) *request.mutable_options()->mutable_cache() = **std::move(cache);
  if (flags.flags.Has("prefix")) {
    request.mutable_options()->set_prefix(flags.flags.GetString("prefix"));
  }
  absl::StatusOr<std::optional<int64_t>> ttl_seconds = flags.GetInt64("ttl-seconds");
  if (!ttl_seconds.ok()) return ttl_seconds.status();
  if (ttl_seconds->has_value()) request.mutable_options()->set_ttl_seconds(**ttl_seconds);
  return request;
}

absl::StatusOr<std::string> SessionIdArgument(const ParsedFlags& flags) {
  if (flags.arguments.empty() || flags.arguments[0].empty()) {
    return absl::InvalidArgumentError("the session ID is required");
  }
  return flags.arguments[0];
}

absl::StatusOr<RollbackArguments> ParseRollbackArguments(const ParsedFlags& flags) {
  if (flags.arguments.size() < 2 || flags.arguments[0].empty()) {
    return absl::InvalidArgumentError(
        "the session ID and N (the number of tokens to drop) are required");
  }
  RollbackArguments arguments{.id = flags.arguments[0]};
  if (!absl::SimpleAtoi(flags.arguments[1], &arguments.n)) {
    return absl::InvalidArgumentError(
        absl::StrCat("N: '", flags.arguments[1], "' is not a 32-bit integer"));
  }
  return arguments;
}

int RunSessionCreate(const Globals& globals, const ParsedFlags& flags, std::ostream& out,
                     std::ostream& err) {
  absl::StatusOr<v1::CreateSessionRequest> request = BuildCreateSessionRequest(flags);
  if (!request.ok()) return BadFlags("session create", request.status(), err);
  absl::StatusOr<v1::Session> session = Connect(globals)->CreateSession(*request, globals.call);
  if (!session.ok()) return RpcError(session.status(), err);
  out << (globals.json ? ToJson(*session) : SessionText(*session)) << std::endl;
  return kExitOk;
}

int RunSessionGet(const Globals& globals, const ParsedFlags& flags, std::ostream& out,
                  std::ostream& err) {
  absl::StatusOr<std::string> id = SessionIdArgument(flags);
  if (!id.ok()) return BadFlags("session get", id.status(), err);
  absl::StatusOr<v1::Session> session = Connect(globals)->GetSession(*id, globals.call);
  if (!session.ok()) return RpcError(session.status(), err);
  out << (globals.json ? ToJson(*session) : SessionText(*session)) << std::endl;
  return kExitOk;
}

int RunSessionList(const Globals& globals, const ParsedFlags& flags, std::ostream& out,
                   std::ostream& err) {
  absl::StatusOr<v1::ListSessionsResponse> response = Connect(globals)->ListSessions(globals.call);
  if (!response.ok()) return RpcError(response.status(), err);
  out << (globals.json ? ToJson(*response) + "\n" : SessionTableText(*response)) << std::flush;
  return kExitOk;
}

int RunSessionClose(const Globals& globals, const ParsedFlags& flags, std::ostream& out,
                    std::ostream& err) {
  absl::StatusOr<std::string> id = SessionIdArgument(flags);
  if (!id.ok()) return BadFlags("session close", id.status(), err);
  const absl::Status status = Connect(globals)->CloseSession(*id, globals.call);
  if (!status.ok()) return RpcError(status, err);
  out << (globals.json ? ToJson(v1::CloseSessionResponse()) : absl::StrCat("closed ", *id))
      << std::endl;
  return kExitOk;
}

int RunSessionRollback(const Globals& globals, const ParsedFlags& flags, std::ostream& out,
                       std::ostream& err) {
  absl::StatusOr<RollbackArguments> arguments = ParseRollbackArguments(flags);
  if (!arguments.ok()) return BadFlags("session rollback", arguments.status(), err);
  absl::StatusOr<v1::Session> session =
      Connect(globals)->RollbackSession(arguments->id, arguments->n, globals.call);
  if (!session.ok()) return RpcError(session.status(), err);
  out << (globals.json ? ToJson(*session) : SessionText(*session)) << std::endl;
  return kExitOk;
}

CommandGroup SessionCommandGroup() {
  return {
      "session",
      "Creates, prints, lists, closes and rolls back chat sessions (Sessions)",
      {
          {"create",
           "Opens a session (a cache kept across the turns of a conversation; generate "
           "--session ID runs a turn) and prints it.",
           SessionCreateFlagSpecs(),
           {},
           [](const Globals& g, const ParsedFlags& f) {
             return RunSessionCreate(g, f, std::cout, std::cerr);
           },
           {},
           "\nA session lives in the memory of the replica that created it: behind a gateway,\n"
           "give its create, its turns and the other session commands the same --route.\n"
           "generate --session ID --messages JSON sends the whole conversation; --prompt or\n"
           "--token-ids append to the session's history.\n"},
          {"get",
           "Prints the session whose id is ID.",
           {},
           {},
           [](const Globals& g, const ParsedFlags& f) {
             return RunSessionGet(g, f, std::cout, std::cerr);
           },
           {"ID"}},
          {"list",
           "Prints a table of every open session.",
           {},
           {},
           [](const Globals& g, const ParsedFlags& f) {
             return RunSessionList(g, f, std::cout, std::cerr);
           }},
          {"close",
           "Closes the session whose id is ID and frees its cache.",
           {},
           {},
           [](const Globals& g, const ParsedFlags& f) {
             return RunSessionClose(g, f, std::cout, std::cerr);
           },
           {"ID"}},
          {"rollback",
           "Drops the last N tokens of the session ID's history and prints the session.",
           {},
           {},
           [](const Globals& g, const ParsedFlags& f) {
             return RunSessionRollback(g, f, std::cout, std::cerr);
           },
           {"ID", "N"},
           "\nN is 1 .. the session's num_tokens; a named prefix's tokens cannot be dropped, and\n"
           "a turn running on the session makes it FAILED_PRECONDITION. The next turn continues\n"
           "from the shortened history.\n"},
      },
  };
}

}  // namespace kvserve::client
