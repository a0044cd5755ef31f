// kvctl chat: flags, the line loop and the command (see kvctl_chat.h).
#include "client/kvctl_chat.h"

#include <unistd.h>

#include <cstdint>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "client/client.h"
#include "client/kvctl_session.h"
#include "client/output.h"
#include "client/request_flags.h"

namespace kvserve::client {
namespace {

// "chat-" and 16 random hex digits: one conversation's routing key.
std::string RandomConversationKey() {
  std::random_device device;
  const uint64_t value = (static_cast<uint64_t>(device()) << 32) | device();
  return absl::StrFormat("chat-%016x", value);
}

// What the loop does after a line.
enum class Next { kContinue, kQuit, kConnectionLost };

// Writes `status` as RpcError does; kConnectionLost for UNAVAILABLE, kContinue otherwise.
Next Report(const absl::Status& status, std::ostream& err) {
  RpcError(status, err);
  return absl::IsUnavailable(status) ? Next::kConnectionLost : Next::kContinue;
}

// "1 turn", "2 turns".
std::string Turns(int n) { return absl::StrCat(n, n == 1 ? " turn" : " turns"); }

Next RunRollback(ChatSession& chat, const std::vector<std::string>& words, std::ostream& err) {
  int turns = 1;
  if (words.size() > 2 || (words.size() == 2 && !absl::SimpleAtoi(words[1], &turns))) {
    return Report(absl::InvalidArgumentError("usage: /rollback [N], N a number of turns"), err);
  }
  absl::StatusOr<ChatRollback> rollback = chat.Rollback(turns);
  if (!rollback.ok()) return Report(rollback.status(), err);
  if (rollback->session.has_value()) {
    err << "[rolled back " << Turns(rollback->turns) << ": " << rollback->tokens
        << " tokens dropped, the session holds " << rollback->session->num_tokens() << " tokens]"
        << std::endl;
  } else {
    err << "[rolled back " << Turns(rollback->turns) << ": no tokens to drop]" << std::endl;
  }
  return Next::kContinue;
}

Next RunCommand(ChatSession& chat, const std::string& line, std::ostream& err) {
  const std::vector<std::string> words =
      absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
  const std::string& command = words[0];
  if (command == "/quit" || command == "/exit") return Next::kQuit;
  if (command == "/help") {
    err << ChatCommandsHelp() << std::flush;
    return Next::kContinue;
  }
  if (command == "/rollback") return RunRollback(chat, words, err);
  if (command == "/reset") {
    absl::StatusOr<v1::Session> session = chat.Reset();
    if (!session.ok()) return Report(session.status(), err);
    err << "[reset: session " << session->id() << "]" << std::endl;
    return Next::kContinue;
  }
  err << "kvctl chat: unknown command '" << command << "' (/help lists them)" << std::endl;
  return Next::kContinue;
}

Next RunTurn(ChatSession& chat, const std::string& line, std::ostream& out, std::ostream& err) {
  bool printed = false;
  absl::StatusOr<ChatTurn> turn = chat.Send(line, [&](absl::string_view text) {
    out << text << std::flush;
    printed = true;
  });
  // Each answer ends its line, a cut-off one included.
  if (turn.ok() || printed) out << std::endl;
  if (!turn.ok()) return Report(turn.status(), err);
  err << ChatTurnText(turn->number, turn->usage, turn->timings, turn->cache_report) << std::endl;
  return Next::kContinue;
}

}  // namespace

std::vector<base::FlagSpec> ChatFlagSpecs() {
  std::vector<base::FlagSpec> specs = {
      {"system", "content of the system message the conversation starts with", "none"},
  };
  for (const std::vector<base::FlagSpec>& group : {SessionCreateFlagSpecs(), SamplingFlagSpecs()}) {
    specs.insert(specs.end(), group.begin(), group.end());
  }
  specs.push_back({"template-kwargs",
                   "chat-template keyword arguments of every turn, a JSON object: "
                   "{\"enable_thinking\":false}",
                   ""});
  return specs;
}

std::vector<std::string> ChatRepeatableFlags() { return {"stop"}; }

absl::StatusOr<ChatOptions> BuildChatOptions(const ParsedFlags& flags) {
  ChatOptions options;
  absl::StatusOr<v1::CreateSessionRequest> create = BuildCreateSessionRequest(flags);
  if (!create.ok()) return create.status();
  options.create = *std::move(create);
  options.system = flags.flags.GetString("system");
  absl::StatusOr<std::optional<v1::SamplingParams>> sampling = BuildSamplingParams(flags);
  if (!sampling.ok()) return sampling.status();
  options.sampling = *std::move(sampling);
  absl::StatusOr<std::string> template_kwargs = TemplateKwargsFlag(flags);
  if (!template_kwargs.ok()) return template_kwargs.status();
  options.template_kwargs = *std::move(template_kwargs);
  return options;
}

std::string ChatCommandsHelp() {
  return "  /rollback [N]  forget the last N exchanges (default 1: your last message and its\n"
         "                 answer) and drop the tokens they added from the session\n"
         "  /reset         close the session and start over on a new one (the system message "
         "stays)\n"
         "  /help          this list\n"
         "  /quit          close the session and exit (as does the end of the input)\n";
}

int RunChatLoop(ChatSession& chat, std::istream& in, std::ostream& out, std::ostream& err,
                bool interactive) {
  absl::StatusOr<v1::Session> session = chat.Open();
  if (!session.ok()) return RpcError(session.status(), err);
  err << "[session " << session->id() << "]" << std::endl;
  Next next = Next::kContinue;
  std::string line;
  while (next == Next::kContinue) {
    if (interactive) err << "> " << std::flush;
    if (!std::getline(in, line)) break;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    next = line[0] == '/' ? RunCommand(chat, line, err) : RunTurn(chat, line, out, err);
  }
  if (interactive && next == Next::kContinue) err << std::endl;  // after the end-of-input key
  if (next == Next::kConnectionLost) return kExitRpcError;
  const std::string id = chat.session_id();
  if (id.empty()) return kExitOk;  // a failed /reset left none open
  const absl::Status closed = chat.Close();
  if (!closed.ok()) {
    // A session that expired meanwhile is closed all the same.
    if (!absl::IsNotFound(closed)) return RpcError(closed, err);
  } else {
    err << "[session " << id << " closed]" << std::endl;
  }
  return kExitOk;
}

int RunChat(const Globals& globals, const ParsedFlags& flags, std::istream& in, std::ostream& out,
            std::ostream& err, bool interactive) {
  if (globals.json) {
    return BadFlags("chat", absl::InvalidArgumentError("--output json is not supported"), err);
  }
  absl::StatusOr<ChatOptions> options = BuildChatOptions(flags);
  if (!options.ok()) return BadFlags("chat", options.status(), err);
  CallOptions call = globals.call;
  if (!flags.flags.Has("route") && call.route.empty()) call.route = RandomConversationKey();
  const std::unique_ptr<Client> client = Connect(globals);
  ClientChatRpcs rpcs(client.get(), std::move(call));
  ChatSession chat(&rpcs, *std::move(options));
  return RunChatLoop(chat, in, out, err, interactive);
}

Command ChatCommand() {
  return {
      "chat",
      "Chats on a new session: one message per line, each answer streamed, then its token counts "
      "and TTFT.",
      ChatFlagSpecs(),
      ChatRepeatableFlags(),
      [](const Globals& g, const ParsedFlags& f) {
        return RunChat(g, f, std::cin, std::cout, std::cerr, isatty(STDIN_FILENO) == 1);
      },
      {},
      absl::StrCat(
          "\nEach line is a user message; every turn sends the whole conversation (the system\n"
          "message, then the user messages and the answers) and the session reuses its cache for\n"
          "what it holds of it. Answers go to stdout; after each, stderr gets\n"
          "  [turn T: P prompt tokens, C cached, ttft X ms, N new tokens]\n"
          "with \", recomputed: WHY\" before the bracket when the session's cache could not be "
          "used.\n"
          "Without a terminal on stdin there is no prompt: printf 'Hi\\nAnd then?\\n' | kvctl "
          "chat.\n"
          "Errors are printed and the chat goes on, except a lost connection (exit code 1).\n"
          "Behind a gateway every call carries one routing key: --route, else --prefix, else a\n"
          "random one.\n\ncommands (lines starting with '/'):\n",
          ChatCommandsHelp())};
}

}  // namespace kvserve::client
