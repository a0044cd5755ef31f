// ParsedFlags: kvctl's flag parsing on top of base::CommandLine, adding repeatable flags
// (--stop a --stop b), a refusal of flags given as another flag's value, and typed getters that
// check a value's range and name the flag.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/command_line.h"

namespace kvserve::client {

struct ParsedFlags {
  base::CommandLine flags;
  // Every value of each repeatable flag, in the order given; a flag never given is absent.
  std::map<std::string, std::vector<std::string>> repeated;
  // The positional arguments, in the order given (at most as many as the command names).
  std::vector<std::string> arguments;

  // The flag's value as an int32, nullopt when not given; InvalidArgument naming the flag when
  // it is not an integer or does not fit.
  absl::StatusOr<std::optional<int32_t>> GetInt32(const std::string& name) const;
  // Same for int64.
  absl::StatusOr<std::optional<int64_t>> GetInt64(const std::string& name) const;
  // Same for a non-negative integer up to 2^64 - 1.
  absl::StatusOr<std::optional<uint64_t>> GetUint64(const std::string& name) const;
  // Same for a float.
  absl::StatusOr<std::optional<float>> GetFloat(const std::string& name) const;
  // A switch (--name, --name=true, --name=false); nullopt when not given.
  std::optional<bool> GetSwitch(const std::string& name) const;
};

// Parses `args` (no program name) against `specs`. Flags named in `repeatable` may be given
// several times (`--stop a --stop=b`) and land in ParsedFlags::repeated; they must also be in
// `specs` so that --help lists them. A flag that takes a value takes the next argument unless
// that is itself a flag (see FlagValueAfter); `--prompt=--ignore-eos` gives such a value.
// Switches (FlagSpec::is_bool) take no separate value: `--pinned`, `--pinned=false`. Up to
// `arguments.size()` positional arguments (named by `arguments` for --help: "ID", "N") land in
// ParsedFlags::arguments, before, between or after the flags; fewer is for the command to
// refuse. Errors (unknown flag, missing value, one positional argument too many) are
// InvalidArgument naming the flag or the argument; their messages carry no "see --help", which
// the caller adds once.
absl::StatusOr<ParsedFlags> ParseFlags(const std::vector<std::string>& args,
                                       std::vector<base::FlagSpec> specs,
                                       const std::vector<std::string>& repeatable = {},
                                       const std::vector<std::string>& arguments = {});

// True when `arg` is a flag of `specs` (`--name` or `--name=...`), `--help` or `-h`.
bool IsKnownFlag(const std::string& arg, const std::vector<base::FlagSpec>& specs);

// The value of the flag `--name`, given without '=' at args[at]: args[at + 1]. InvalidArgument
// naming the flag when there is none, or when it is a known flag of `specs` (IsKnownFlag):
// `--prompt --ignore-eos` is a forgotten value far more often than a prompt, and
// `--prompt=--ignore-eos` still gives that text.
absl::StatusOr<std::string> FlagValueAfter(const std::string& name,
                                           const std::vector<std::string>& args, size_t at,
                                           const std::vector<base::FlagSpec>& specs);

}  // namespace kvserve::client
