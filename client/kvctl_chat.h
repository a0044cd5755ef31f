// kvctl chat: an interactive conversation on a session. Reads one user message per line (from a
// terminal or a pipe), streams each answer to stdout and a line of token counts and TTFT to
// stderr; /rollback [N], /reset, /help and /quit are commands.
#pragma once

#include <istream>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/command_line.h"
#include "client/chat_session.h"
#include "client/flags.h"
#include "client/kvctl_command.h"

namespace kvserve::client {

// The flags of `kvctl chat`: --system, those of `session create` (cache strategy, --prefix,
// --ttl-seconds), the sampling flags of generate and --template-kwargs.
std::vector<base::FlagSpec> ChatFlagSpecs();
// Those of them that may be given several times (--stop).
std::vector<std::string> ChatRepeatableFlags();

// The chat's options from flags parsed with ChatFlagSpecs(). A malformed value is
// InvalidArgument naming the flag; values are otherwise left for the server to validate.
absl::StatusOr<ChatOptions> BuildChatOptions(const ParsedFlags& flags);

// The help text of the chat's commands, one per line.
std::string ChatCommandsHelp();

// Runs the conversation: opens the session ("[session ID]" on `err`), then reads `in` line by
// line until its end or /quit. A line is a user message (empty ones are skipped; a trailing
// '\r' is dropped) or, when it starts with '/', a command. Each answer is streamed to `out` and
// ended with a newline, then ChatTurnText goes to `err`. With `interactive`, "> " is written to
// `err` before each line is read. An error is written as RpcError writes it and the
// conversation goes on, except UNAVAILABLE (the connection is lost), which ends it. The
// session is closed at the end ("[session ID closed]"). Returns kExitOk, or kExitRpcError when
// the first session cannot be opened or the connection was lost.
int RunChatLoop(ChatSession& chat, std::istream& in, std::ostream& out, std::ostream& err,
                bool interactive);

// kvctl chat's body: connects to globals.target and runs RunChatLoop with the options of
// `flags`. Every call carries one routing key, so that behind a gateway they all reach the
// replica holding the session: --route when given, else --prefix, else "chat-" and 16 random
// hex digits. --output json is refused (kExitBadFlags).
int RunChat(const Globals& globals, const ParsedFlags& flags, std::istream& in, std::ostream& out,
            std::ostream& err, bool interactive);

// `kvctl chat` for kvctl's command table: stdin, stdout and stderr; interactive when stdin is a
// terminal.
Command ChatCommand();

}  // namespace kvserve::client
