// kvctl prefix: the PrefixCache subcommands (see kvctl_prefix.h).
#include "client/kvctl_prefix.h"

#include <iostream>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "client/output.h"
#include "client/request_flags.h"
#include "client/text_input.h"

namespace kvserve::client {
namespace {

// Sets the request's content oneof from exactly one of the content flags.
absl::Status SetContent(const ParsedFlags& parsed, std::istream& in,
                        v1::RegisterPrefixRequest& request) {
  const base::CommandLine& flags = parsed.flags;
  const int given =
      flags.Has("text") + flags.Has("file") + flags.Has("token-ids") + flags.Has("messages");
  if (given != 1) {
    return absl::InvalidArgumentError(
        given == 0 ? "one of --text, --file, --token-ids, --messages is required"
                   : "give only one of --text, --file, --token-ids, --messages");
  }
  if (flags.Has("text")) {
    request.set_text(flags.GetString("text"));
  } else if (flags.Has("file")) {
    absl::StatusOr<std::string> text = ReadTextInput("file", flags.GetString("file"), in);
    if (!text.ok()) return text.status();
    request.set_text(*std::move(text));
  } else {
    return SetTokenIdsOrMessages(flags, request);
  }
  return absl::OkStatus();
}

// Sets each option whose flag is given; `options` is created only when one is.
absl::Status SetOptions(const ParsedFlags& parsed, v1::RegisterPrefixRequest& request) {
  absl::StatusOr<std::optional<int64_t>> ttl_seconds = parsed.GetInt64("ttl-seconds");
  if (!ttl_seconds.ok()) return ttl_seconds.status();
  if (std::optional<bool> pinned = parsed.GetSwitch("pinned")) {
    request.mutable_options()->set_pinned(*pinned);
  }
  if (ttl_seconds->has_value()) request.mutable_options()->set_ttl_seconds(**ttl_seconds);
  if (parsed.flags.Has("retention")) {
    request.mutable_options()->set_retention(parsed.flags.GetString("retention"));
  }
  if (parsed.flags.Has("cache-implementation")) {
    request.mutable_options()->set_cache_implementation(
        parsed.flags.GetString("cache-implementation"));
  }
  request.set_shared(parsed.flags.GetBool("shared"));
  return absl::OkStatus();
}

std::vector<base::FlagSpec> NameFlagSpecs() { return {{"name", "the prefix's name", ""}}; }

}  // namespace

std::vector<base::FlagSpec> PrefixRegisterFlagSpecs() {
  return {
      {"name", "name that requests give as --prefix: 1 to 128 characters of [A-Za-z0-9._-]", ""},
      {"text", "content as text (tokenized with the model's special tokens, e.g. BOS)", ""},
      {"file", "content as text read from this file, as is; - reads stdin", ""},
      {"token-ids", "content as token ids, comma-separated: 1,450,29", ""},
      {"messages", "content as a conversation, JSON (as for generate), no generation prompt", ""},
      {"pinned", "never evicted to make room (--pinned=false: evicted when room is needed)",
       "server: true", true},
      {"ttl-seconds", "removed this many seconds after registration (0: never)", "server: never"},
      {"retention", "retention class: pinned, or (unpinned) high, normal, low", "server: pinned"},
      {"cache-implementation", "strategy the snapshot is prefilled in (dynamic, static, ...)",
       "server: dynamic"},
      {"shared", "register it in the shared namespace every tenant can use (admins only)", "",
       true},
  };
}

absl::StatusOr<std::string> PrefixNameFlag(const ParsedFlags& flags) {
  const std::string name = flags.flags.GetString("name");
  if (name.empty()) return absl::InvalidArgumentError("--name is required");
  return name;
}

absl::StatusOr<v1::RegisterPrefixRequest> BuildRegisterPrefixRequest(const ParsedFlags& flags,
                                                                     std::istream& in) {
  v1::RegisterPrefixRequest request;
  absl::StatusOr<std::string> name = PrefixNameFlag(flags);
  if (!name.ok()) return name.status();
  request.set_name(*std::move(name));
  if (absl::Status s = SetContent(flags, in, request); !s.ok()) return s;
  if (absl::Status s = SetOptions(flags, request); !s.ok()) return s;
  return request;
}

int RunPrefixRegister(const Globals& globals, const ParsedFlags& flags, std::ostream& out,
                      std::ostream& err) {
  absl::StatusOr<v1::RegisterPrefixRequest> request = BuildRegisterPrefixRequest(flags);
  if (!request.ok()) return BadFlags("prefix register", request.status(), err);
  absl::StatusOr<v1::Prefix> prefix = Connect(globals)->RegisterPrefix(*request, globals.call);
  if (!prefix.ok()) return RpcError(prefix.status(), err);
  out << (globals.json ? ToJson(*prefix) : PrefixText(*prefix)) << std::endl;
  return kExitOk;
}

int RunPrefixGet(const Globals& globals, const ParsedFlags& flags, std::ostream& out,
                 std::ostream& err) {
  absl::StatusOr<std::string> name = PrefixNameFlag(flags);
  if (!name.ok()) return BadFlags("prefix get", name.status(), err);
  absl::StatusOr<v1::Prefix> prefix = Connect(globals)->GetPrefix(*name, globals.call);
  if (!prefix.ok()) return RpcError(prefix.status(), err);
  out << (globals.json ? ToJson(*prefix) : PrefixText(*prefix)) << std::endl;
  return kExitOk;
}

int RunPrefixList(const Globals& globals, const ParsedFlags& flags, std::ostream& out,
                  std::ostream& err) {
  absl::StatusOr<v1::ListPrefixesResponse> response = Connect(globals)->ListPrefixes(globals.call);
  if (!response.ok()) return RpcError(response.status(), err);
  out << (globals.json ? ToJson(*response) + "\n" : PrefixTableText(*response)) << std::flush;
  return kExitOk;
}

int RunPrefixDelete(const Globals& globals, const ParsedFlags& flags, std::ostream& out,
                    std::ostream& err) {
  absl::StatusOr<std::string> name = PrefixNameFlag(flags);
  if (!name.ok()) return BadFlags("prefix delete", name.status(), err);
  const absl::Status status =
      Connect(globals)->DeletePrefix(*name, globals.call, nullptr, flags.flags.GetBool("shared"));
  if (!status.ok()) return RpcError(status, err);
  out << (globals.json ? ToJson(v1::DeletePrefixResponse()) : absl::StrCat("deleted ", *name))
      << std::endl;
  return kExitOk;
}

CommandGroup PrefixCommandGroup() {
  return {
      "prefix",
      "Registers, prints, lists and deletes named prefixes (PrefixCache)",
      {
          {"register",
           "Registers a prefix (prefilled once on the server) and prints it.",
           PrefixRegisterFlagSpecs(),
           {},
           [](const Globals& g, const ParsedFlags& f) {
             return RunPrefixRegister(g, f, std::cout, std::cerr);
           }},
          {"get",
           "Prints the prefix registered under --name.",
           NameFlagSpecs(),
           {},
           [](const Globals& g, const ParsedFlags& f) {
             return RunPrefixGet(g, f, std::cout, std::cerr);
           }},
          {"list",
           "Prints a table of every registered prefix.",
           {},
           {},
           [](const Globals& g, const ParsedFlags& f) {
             return RunPrefixList(g, f, std::cout, std::cerr);
           }},
          {"delete",
           "Deletes the prefix registered under --name (the caller's own, else the shared one).",
           {{"name", "the prefix's name", ""},
            {"shared", "delete the shared prefix of that name (admins only)", "", true}},
           {},
           [](const Globals& g, const ParsedFlags& f) {
             return RunPrefixDelete(g, f, std::cout, std::cerr);
           }},
      },
  };
}

}  // namespace kvserve::client
