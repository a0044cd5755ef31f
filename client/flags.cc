// kvctl's flag parsing (see flags.h).
#include "client/flags.h"

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace kvserve::client {
namespace {

bool Contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

const base::FlagSpec* FindSpec(const std::vector<base::FlagSpec>& specs, const std::string& name) {
  for (const base::FlagSpec& spec : specs) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

// Parses `text` with absl's SimpleAtoi-style `parse` into T, or InvalidArgument naming `flag`.
template <typename T, typename Parse>
absl::StatusOr<std::optional<T>> ParseValue(const base::CommandLine& flags, const std::string& flag,
                                            const char* what, Parse parse) {
  if (!flags.Has(flag)) return std::optional<T>();
  const std::string text = flags.GetString(flag);
  T value{};
  if (!parse(text, &value)) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": '", text, "' is not ", what));
  }
  return std::optional<T>(value);
}

// "name" of "--name" or "--name=value".
std::string FlagName(const std::string& arg) {
  const size_t eq = arg.find('=');
  return arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
}

// The error of args[at], a positional argument beyond those the command takes. After a switch,
// "true" or "false" was meant as its value, which a switch takes only after '='.
absl::Status UnexpectedArgument(const std::vector<std::string>& args, size_t at,
                                const std::vector<base::FlagSpec>& specs) {
  const std::string& arg = args[at];
  if ((arg == "true" || arg == "false") && at > 0) {
    const std::string& before = args[at - 1];
    const base::FlagSpec* spec = before.rfind("--", 0) == 0 && before.find('=') == std::string::npos
                                     ? FindSpec(specs, FlagName(before))
                                     : nullptr;
    if (spec != nullptr && spec->is_bool) {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument '", arg, "': ", before, " is a switch; write ", before,
                       "=", arg, arg == "true" ? " or " + before + " alone" : ""));
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unexpected argument '", arg, "' (flags start with --)"));
}

}  // namespace

absl::StatusOr<std::optional<int32_t>> ParsedFlags::GetInt32(const std::string& name) const {
  return ParseValue<int32_t>(flags, name, "a 32-bit integer", [](const std::string& s, int32_t* v) {
    return absl::SimpleAtoi(s, v);
  });
}

absl::StatusOr<std::optional<int64_t>> ParsedFlags::GetInt64(const std::string& name) const {
  return ParseValue<int64_t>(flags, name, "an integer", [](const std::string& s, int64_t* v) {
    return absl::SimpleAtoi(s, v);
  });
}

absl::StatusOr<std::optional<uint64_t>> ParsedFlags::GetUint64(const std::string& name) const {
  return ParseValue<uint64_t>(flags, name, "a non-negative integer",
                              [](const std::string& s, uint64_t* v) {
                                // SimpleAtoi into an unsigned type accepts "-1" on some abseil
                                // versions; refuse signs.
                                return !s.empty() && s[0] != '-' && absl::SimpleAtoi(s, v);
                              });
}

absl::StatusOr<std::optional<float>> ParsedFlags::GetFloat(const std::string& name) const {
  return ParseValue<float>(flags, name, "a number",
                           [](const std::string& s, float* v) { return absl::SimpleAtof(s, v); });
}

std::optional<bool> ParsedFlags::GetSwitch(const std::string& name) const {
  if (!flags.Has(name)) return std::nullopt;
  return flags.GetBool(name);
}

bool IsKnownFlag(const std::string& arg, const std::vector<base::FlagSpec>& specs) {
  if (arg == "--help" || arg == "-h") return true;
  if (arg.size() <= 2 || arg.rfind("--", 0) != 0) return false;
  return FindSpec(specs, FlagName(arg)) != nullptr;
}

absl::StatusOr<std::string> FlagValueAfter(const std::string& name,
                                           const std::vector<std::string>& args, size_t at,
                                           const std::vector<base::FlagSpec>& specs) {
  if (at + 1 >= args.size()) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
  }
  const std::string& next = args[at + 1];
  if (IsKnownFlag(next, specs)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, " needs a value, but the next argument ", next,
                     " is a flag (write --", name, "=", next, " to give it as the value)"));
  }
  return next;
}

absl::StatusOr<ParsedFlags> ParseFlags(const std::vector<std::string>& args,
                                       std::vector<base::FlagSpec> specs,
                                       const std::vector<std::string>& repeatable,
                                       const std::vector<std::string>& arguments) {
  ParsedFlags parsed;
  // What CommandLine::Parse gets: the program's name, then `--name value` pairs, `--name=value`
  // and switches, every one checked here first so that its errors (which add "see --help") are
  // never reached.
  std::vector<std::string> rest = {"kvctl"};
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--help" || arg == "-h") {
      rest.push_back(arg);
      continue;
    }
    if (arg.size() <= 2 || arg.rfind("--", 0) != 0) {
      if (parsed.arguments.size() < arguments.size()) {
        parsed.arguments.push_back(arg);
        continue;
      }
      return UnexpectedArgument(args, i, specs);
    }
    const std::string name = FlagName(arg);
    const base::FlagSpec* spec = FindSpec(specs, name);
    if (spec == nullptr) return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    const bool has_value = arg.find('=') != std::string::npos;
    if (Contains(repeatable, name)) {
      if (has_value) {
        parsed.repeated[name].push_back(arg.substr(arg.find('=') + 1));
        continue;
      }
      absl::StatusOr<std::string> value = FlagValueAfter(name, args, i++, specs);
      if (!value.ok()) return value.status();
      parsed.repeated[name].push_back(*std::move(value));
      continue;
    }
    rest.push_back(arg);
    if (!spec->is_bool && !has_value) {
      absl::StatusOr<std::string> value = FlagValueAfter(name, args, i++, specs);
      if (!value.ok()) return value.status();
      rest.push_back(*std::move(value));
    }
  }
  std::vector<char*> argv;
  argv.reserve(rest.size());
  for (std::string& s : rest) argv.push_back(s.data());
  absl::StatusOr<base::CommandLine> flags =
      base::CommandLine::Parse(static_cast<int>(argv.size()), argv.data(), std::move(specs));
  if (!flags.ok()) return flags.status();
  parsed.flags = *std::move(flags);
  return parsed;
}

}  // namespace kvserve::client
