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

absl::StatusOr<std::optional<bool>> ParsedFlags::GetBoolValue(const std::string& name) const {
  return ParseValue<bool>(flags, name, "true or false", [](const std::string& s, bool* v) {
    if (s != "true" && s != "false") return false;
    *v = s == "true";
    return true;
  });
}

std::optional<bool> ParsedFlags::GetSwitch(const std::string& name) const {
  if (!flags.Has(name)) return std::nullopt;
  return flags.GetBool(name);
}

absl::StatusOr<ParsedFlags> ParseFlags(const std::vector<std::string>& args,
                                       std::vector<base::FlagSpec> specs,
                                       const std::vector<std::string>& repeatable,
                                       const std::vector<std::string>& arguments) {
  ParsedFlags parsed;
  // CommandLine::Parse skips argv[0].
  std::vector<std::string> rest = {"kvctl"};
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg.size() <= 2 || arg.rfind("--", 0) != 0) {
      if (parsed.arguments.size() < arguments.size()) {
        parsed.arguments.push_back(arg);
      } else {
        rest.push_back(arg);  // refused by CommandLine::Parse, which names it
      }
      continue;
    }
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    const base::FlagSpec* spec = FindSpec(specs, name);
    if (Contains(repeatable, name)) {
      if (eq != std::string::npos) {
        parsed.repeated[name].push_back(arg.substr(eq + 1));
      } else if (i + 1 < args.size()) {
        parsed.repeated[name].push_back(args[++i]);
      } else {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
      }
      continue;
    }
    rest.push_back(arg);
    // A value flag's next argument is its value, even when it starts with dashes.
    if (spec != nullptr && !spec->is_bool && eq == std::string::npos && i + 1 < args.size()) {
      rest.push_back(args[++i]);
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
