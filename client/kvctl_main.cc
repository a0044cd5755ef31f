// kvctl: the command-line client of a kvserve server (generate, stream, tokenize, info,
// health, bench, chat, prefix, session). Exit codes: 0 ok, 1 RPC error (or not SERVING), 2 bad
// flags, 3 a generation the server cancelled (partial output).
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/client.h"
#include "client/flags.h"
#include "client/kvctl_bench.h"
#include "client/kvctl_chat.h"
#include "client/kvctl_command.h"
#include "client/kvctl_generate.h"
#include "client/kvctl_prefix.h"
#include "client/kvctl_session.h"
#include "client/kvctl_version.h"
#include "client/output.h"
#include "client/request_flags.h"

namespace kvserve::client {
namespace {

bool IsGlobalValueFlag(const std::string& name) {
  for (const base::FlagSpec& spec : GlobalFlagSpecs()) {
    if (spec.name == name) return true;
  }
  return false;
}

int RunTokenize(const Globals& globals, const ParsedFlags& flags) {
  absl::StatusOr<v1::TokenizeRequest> request = BuildTokenizeRequest(flags);
  if (!request.ok()) return BadFlags("tokenize", request.status());
  absl::StatusOr<v1::TokenizeResponse> response =
      Connect(globals)->Tokenize(*request, globals.call);
  if (!response.ok()) return RpcError(response.status());
  std::cout << (globals.json ? ToJson(*response) : TokenIdsText(*response)) << std::endl;
  return kExitOk;
}

int RunInfo(const Globals& globals, const ParsedFlags& flags) {
  absl::StatusOr<v1::ModelInfo> info = Connect(globals)->GetModelInfo(globals.call);
  if (!info.ok()) return RpcError(info.status());
  if (globals.json) {
    std::cout << ToJson(*info) << std::endl;
  } else {
    std::cout << ModelInfoText(*info);
  }
  return kExitOk;
}

int RunHealth(const Globals& globals, const ParsedFlags& flags) {
  using grpc::health::v1::HealthCheckResponse;
  absl::StatusOr<HealthCheckResponse::ServingStatus> status =
      Connect(globals)->CheckHealth(globals.call);
  if (!status.ok()) return RpcError(status.status());
  if (globals.json) {
    HealthCheckResponse response;
    response.set_status(*status);
    std::cout << ToJson(response) << std::endl;
  } else {
    std::cout << HealthCheckResponse::ServingStatus_Name(*status) << std::endl;
  }
  return *status == HealthCheckResponse::SERVING ? kExitOk : kExitRpcError;
}

// Draws "[#####.....] phase 12/100" over itself on a terminal's stderr; silent otherwise.
void DrawProgress(const std::string& phase, int finished, int total) {
  static const bool is_tty = isatty(STDERR_FILENO) == 1;
  if (!is_tty) return;
  constexpr int kWidth = 30;
  const int filled = total > 0 ? finished * kWidth / total : kWidth;
  std::cerr << absl::StrFormat("\r[%s%s] %s %d/%d", std::string(filled, '#'),
                               std::string(kWidth - filled, '.'), phase, finished, total);
  if (finished == total) std::cerr << "\n";
  std::cerr << std::flush;
}

int RunBenchCommand(const Globals& globals, const ParsedFlags& flags) {
  absl::StatusOr<BenchOptions> options = ParseBenchOptions(flags);
  if (!options.ok()) return BadFlags("bench", options.status());
  options->call = globals.call;
  std::unique_ptr<Client> client = Connect(globals);
  absl::StatusOr<v1::ModelInfo> info = client->GetModelInfo(globals.call);
  if (!info.ok()) return RpcError(info.status());
  if (absl::Status fits = CheckBenchFitsModel(*options, *info); !fits.ok()) {
    return BadFlags("bench", fits);
  }
  const BenchReport report = RunBench(*client, *options, *info, DrawProgress);
  std::cout << (globals.json ? BenchReportJson(report) + "\n" : BenchReportText(report))
            << std::flush;
  return kExitOk;
}

// Puts the global flags first in the specs of `command`.
void AddGlobalFlags(Command& command) {
  std::vector<base::FlagSpec> specs = GlobalFlagSpecs();
  specs.insert(specs.end(), command.specs.begin(), command.specs.end());
  command.specs = std::move(specs);
}

std::vector<Command> Commands() {
  std::vector<Command> commands = {
      GenerateCommand(),
      StreamCommand(),
      {"tokenize",
       "Prints the token ids of a text or of chat messages.",
       TokenizeFlagSpecs(),
       {},
       RunTokenize},
      {"info", "Prints the served model and the server's limits.", {}, {}, RunInfo},
      {"health", "Prints SERVING or NOT_SERVING; exits 0 only when SERVING.", {}, {}, RunHealth},
      {"bench",
       "Sends --requests streaming requests of synthetic prompts, --concurrency at a time, and "
       "prints TTFT, inter-token latency and tokens/s.",
       BenchFlagSpecs(),
       {},
       RunBenchCommand},
      ChatCommand(),
  };
  for (Command& command : commands) AddGlobalFlags(command);
  return commands;
}

std::vector<CommandGroup> CommandGroups() {
  std::vector<CommandGroup> groups = {PrefixCommandGroup(), SessionCommandGroup()};
  for (CommandGroup& group : groups) {
    for (Command& command : group.commands) AddGlobalFlags(command);
  }
  return groups;
}

// A group's help: its commands and their summaries.
std::string GroupUsage(const CommandGroup& group) {
  std::string out = absl::StrCat("usage: kvctl [global flags] ", group.name, " <command> [flags]\n",
                                 group.summary, ".\n\ncommands:\n");
  for (const Command& command : group.commands) {
    absl::StrAppend(&out, absl::StrFormat("  %-9s %s\n", command.name, command.summary));
  }
  absl::StrAppend(&out, "\n'kvctl ", group.name, " <command> --help' lists a command's flags.\n");
  return out;
}

std::string TopUsage(const std::vector<Command>& commands,
                     const std::vector<CommandGroup>& groups) {
  std::string out =
      "usage: kvctl [--target HOST:PORT] [--timeout-ms MS] [--output text|json] [--route KEY] "
      "[--tls-ca-file PEM [--tls-cert-file PEM --tls-key-file PEM]] [--api-key KEY] <command> "
      "[flags]\n       kvctl --version\n\n"
      "commands:\n";
  for (const Command& command : commands) {
    absl::StrAppend(&out, absl::StrFormat("  %-9s %s\n", command.name, command.summary));
  }
  for (const CommandGroup& group : groups) {
    std::vector<std::string> names;
    for (const Command& command : group.commands) names.push_back(command.name);
    absl::StrAppend(&out, absl::StrFormat("  %-9s %s: %s\n", group.name, group.summary,
                                          absl::StrJoin(names, ", ")));
  }
  absl::StrAppend(&out, "\nglobal flags (before or after the command):\n");
  for (const base::FlagSpec& spec : GlobalFlagSpecs()) {
    absl::StrAppend(&out, absl::StrFormat("  --%-15s %s (default: %s)\n", spec.name, spec.help,
                                          spec.default_text));
  }
  absl::StrAppend(&out,
                  "\nAPI key (a server started with --api-keys-file): every call, health checks "
                  "included,\ncarries 'authorization: Bearer KEY'. Prefer the environment "
                  "variable:\n  export KVSERVE_API_KEY=KEY\nto --api-key KEY, which any user "
                  "can read in the process list (ps).\n"
                  "\nexit codes: 0 ok, 1 RPC error (or not SERVING), 2 bad flags, 3 generate or "
                  "stream\ncut short by the server's shutdown (finish_reason=cancelled: partial "
                  "output).\n"
                  "'kvctl <command> --help' lists a command's flags; kvctl --version names this "
                  "build.\n");
  return out;
}

bool IsHelp(const std::string& arg) { return arg == "--help" || arg == "-h"; }

// The command called `name` among `commands`; null when there is none.
const Command* FindCommand(const std::vector<Command>& commands, const std::string& name) {
  for (const Command& command : commands) {
    if (command.name == name) return &command;
  }
  return nullptr;
}

// The group called `name` among `groups`; null when there is none.
const CommandGroup* FindGroup(const std::vector<CommandGroup>& groups, const std::string& name) {
  for (const CommandGroup& group : groups) {
    if (group.name == name) return &group;
  }
  return nullptr;
}

int Main(int argc, char** argv) {
  const std::vector<Command> commands = Commands();
  const std::vector<CommandGroup> groups = CommandGroups();
  std::vector<std::string> args(argv + 1, argv + argc);
  // The command is the first argument that is neither a flag nor a global flag's value; only
  // global flags may come before it.
  std::optional<size_t> command_at;
  bool help = false;
  for (size_t i = 0; i < args.size() && !command_at.has_value(); ++i) {
    const std::string& arg = args[i];
    if (IsHelp(arg)) {
      help = true;
    } else if (arg == "--version") {
      std::cout << KvctlVersionText();
      return kExitOk;
    } else if (arg.rfind("--", 0) == 0) {
      const std::string name = arg.substr(2, arg.find('=') - 2);
      if (!IsGlobalValueFlag(name)) {
        std::cerr << "kvctl: " << arg << " must come after the command (see kvctl --help)\n";
        return kExitBadFlags;
      }
      if (arg.find('=') == std::string::npos) {
        absl::StatusOr<std::string> value = FlagValueAfter(name, args, i++, GlobalFlagSpecs());
        if (!value.ok()) {
          std::cerr << "kvctl: " << value.status().message() << " (see kvctl --help)\n";
          return kExitBadFlags;
        }
      }
    } else {
      command_at = i;
    }
  }
  if (!command_at.has_value()) {
    (help ? std::cout : std::cerr) << TopUsage(commands, groups);
    return help ? kExitOk : kExitBadFlags;
  }
  std::string name = args[*command_at];
  args.erase(args.begin() + *command_at);
  const Command* command = FindCommand(commands, name);
  if (const CommandGroup* group = FindGroup(groups, name); group != nullptr) {
    // The group's command comes right after the group's name: `kvctl prefix register ...`.
    const bool given = *command_at < args.size();
    if (!given || args[*command_at].rfind("-", 0) == 0) {
      const bool group_help = help || (given && IsHelp(args[*command_at]));
      (group_help ? std::cout : std::cerr) << GroupUsage(*group);
      return group_help ? kExitOk : kExitBadFlags;
    }
    absl::StrAppend(&name, " ", args[*command_at]);
    command = FindCommand(group->commands, args[*command_at]);
    args.erase(args.begin() + *command_at);
    if (command == nullptr) {
      std::cerr << "kvctl: unknown command '" << name << "' (see kvctl " << group->name
                << " --help)\n";
      return kExitBadFlags;
    }
  }
  if (command == nullptr) {
    std::cerr << "kvctl: unknown command '" << name << "' (see kvctl --help)\n";
    return kExitBadFlags;
  }
  absl::StatusOr<ParsedFlags> flags =
      ParseFlags(args, command->specs, command->repeatable, command->arguments);
  if (!flags.ok()) return BadFlags(name, flags.status());
  if (help || flags->flags.help_requested()) {
    std::string program = "kvctl " + name;
    for (const std::string& argument : command->arguments) absl::StrAppend(&program, " ", argument);
    std::cout << flags->flags.Usage(program, command->summary) << command->details;
    return kExitOk;
  }
  absl::StatusOr<Globals> globals = ParseGlobals(*flags);
  if (!globals.ok()) return BadFlags(name, globals.status());
  return command->run(*globals, *flags);
}

}  // namespace
}  // namespace kvserve::client

int main(int argc, char** argv) { return kvserve::client::Main(argc, argv); }
