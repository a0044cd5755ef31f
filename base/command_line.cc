// The shared --flag parser (see command_line.h).
#include "base/command_line.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace kvserve::base {

absl::StatusOr<CommandLine> CommandLine::Parse(int argc, char** argv, std::vector<FlagSpec> specs) {
  CommandLine cl;
  cl.specs_ = std::move(specs);
  auto find = [&](const std::string& name) -> const FlagSpec* {
    for (const FlagSpec& s : cl.specs_) {
      if (s.name == name) return &s;
    }
    return nullptr;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string raw = argv[i];
    if (raw == "--help" || raw == "-h") {
      cl.help_ = true;
      continue;
    }
    if (raw.size() <= 2 || raw.rfind("--", 0) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument '", argv[i], "' (flags start with --; see --help)"));
    }
    const std::string arg = raw.substr(2);
    std::string name = arg;
    std::optional<std::string> value;
    if (const size_t eq = arg.find('='); eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
    }
    const FlagSpec* spec = find(name);
    if (spec == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name, " (see --help)"));
    }
    if (spec->is_bool) {
      if (value.has_value() && *value != "true" && *value != "false") {
        return absl::InvalidArgumentError(
            absl::StrCat("--", name, " takes no value, or =true / =false"));
      }
      cl.values_[name] = value.value_or("true");
      continue;
    }
    if (!value.has_value()) {
      if (i + 1 >= argc)
        return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
      value = argv[++i];
    }
    cl.values_[name] = *value;
  }
  return cl;
}

std::string CommandLine::GetString(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

bool CommandLine::GetBool(const std::string& name) const { return GetString(name) == "true"; }

absl::StatusOr<int64_t> CommandLine::GetInt(const std::string& name, int64_t fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  int64_t v = 0;
  if (!absl::SimpleAtoi(it->second, &v)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, ": '", it->second, "' is not an integer"));
  }
  return v;
}

absl::StatusOr<double> CommandLine::GetDouble(const std::string& name, double fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  double v = 0;
  if (!absl::SimpleAtod(it->second, &v)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, ": '", it->second, "' is not a number"));
  }
  return v;
}

absl::StatusOr<std::vector<int32_t>> CommandLine::GetIntList(const std::string& name) const {
  std::vector<int32_t> out;
  for (absl::string_view part : absl::StrSplit(GetString(name), ',', absl::SkipWhitespace())) {
    int32_t v = 0;
    if (!absl::SimpleAtoi(part, &v)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, ": '", std::string(part), "' is not an integer"));
    }
    out.push_back(v);
  }
  return out;
}

std::string CommandLine::Usage(const std::string& program, const std::string& summary) const {
  std::string out = absl::StrCat("usage: ", program, " [flags]\n", summary, "\n\nflags:\n");
  size_t width = 0;
  for (const FlagSpec& s : specs_) width = std::max(width, s.name.size());
  for (const FlagSpec& s : specs_) {
    absl::StrAppend(&out, "  --", s.name, std::string(width - s.name.size() + 2, ' '), s.help);
    if (!s.default_text.empty()) absl::StrAppend(&out, " (default: ", s.default_text, ")");
    absl::StrAppend(&out, "\n");
  }
  return out;
}

}  // namespace kvserve::base
