// CommandLine: the small --flag parser shared by kvserve's command-line tools (flags are
// spelled with dashes, as users of inference servers expect: --max-new-tokens).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kvserve::base {

struct FlagSpec {
  std::string name;          // without the leading dashes
  std::string help;          // one line
  std::string default_text;  // shown in --help; empty when there is no default
  bool is_bool = false;      // a switch: --name (or --name=true/false), takes no value
};

class CommandLine {
 public:
  // Parses `--name value`, `--name=value` and switches. An unknown flag, a missing value, or
  // a positional argument is InvalidArgument naming it. `--help` sets help_requested().
  static absl::StatusOr<CommandLine> Parse(int argc, char** argv, std::vector<FlagSpec> specs);

  bool help_requested() const { return help_; }
  bool Has(const std::string& name) const { return values_.contains(name); }
  std::string GetString(const std::string& name, const std::string& fallback = "") const;
  bool GetBool(const std::string& name) const;
  // InvalidArgument naming the flag when the value is not an integer / a number.
  absl::StatusOr<int64_t> GetInt(const std::string& name, int64_t fallback) const;
  absl::StatusOr<double> GetDouble(const std::string& name, double fallback) const;
  // A comma-separated list of integers ("1,450,29"); InvalidArgument naming the flag.
  absl::StatusOr<std::vector<int32_t>> GetIntList(const std::string& name) const;

  // "usage: <program> [flags]" and one line per flag.
  std::string Usage(const std::string& program, const std::string& summary) const;

 private:
  std::vector<FlagSpec> specs_;
  std::map<std::string, std::string> values_;
  bool help_ = false;
};

}  // namespace kvserve::base
