// PrefixRegistry: prefix definitions in memory and in an atomically replaced state file.
#include "server/prefix_registry.h"

#include <fcntl.h>
#include <google/protobuf/util/json_util.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace kvserve::server {
namespace {

constexpr char kStateFileName[] = "prefixes.json";

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

absl::StatusOr<v1::PrefixState> ParseStateJson(const std::string& json, const std::string& path) {
  v1::PrefixState state;
  google::protobuf::util::JsonParseOptions options;
  const auto status = google::protobuf::util::JsonStringToMessage(json, &state, options);
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a kvserve.v1.PrefixState: ", status.ToString()));
  }
  return state;
}

// YAML to the equivalent JSON value. Unquoted true/false become booleans; every other scalar
// becomes a string, which the proto3 JSON parser reads into string and integer fields alike
// (so `name: 2024` stays a name, and an out-of-range integer is refused, not clamped).
nlohmann::json YamlToJson(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Sequence: {
      nlohmann::json array = nlohmann::json::array();
      for (const YAML::Node& item : node) array.push_back(YamlToJson(item));
      return array;
    }
    case YAML::NodeType::Map: {
      nlohmann::json object = nlohmann::json::object();
      for (const auto& item : node) object[item.first.as<std::string>()] = YamlToJson(item.second);
      return object;
    }
    case YAML::NodeType::Scalar: {
      const std::string& text = node.Scalar();
      if (node.Tag() != "!" && (text == "true" || text == "false")) return text == "true";
      return text;
    }
    default:
      return nullptr;
  }
}

// Writes `data` to `path` durably: temporary file, fsync, rename, fsync of the directory.
absl::Status WriteAtomically(const std::string& path, const std::string& data) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return absl::InternalError(absl::StrCat(tmp, ": ", std::strerror(errno)));
  size_t written = 0;
  while (written < data.size()) {
    const ssize_t n = ::write(fd, data.data() + written, data.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      return absl::InternalError(absl::StrCat(tmp, ": ", std::strerror(errno)));
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    return absl::InternalError(absl::StrCat(tmp, ": ", std::strerror(errno)));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::InternalError(absl::StrCat(path, ": ", std::strerror(errno)));
  }
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const int dir_fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<PrefixRegistry>> PrefixRegistry::Open(const std::string& state_dir) {
  if (state_dir.empty()) return std::unique_ptr<PrefixRegistry>(new PrefixRegistry(""));
  std::error_code error;
  std::filesystem::create_directories(state_dir, error);
  if (error) {
    return absl::InvalidArgumentError(
        absl::StrCat("--state-dir ", state_dir, ": cannot create (", error.message(), ")"));
  }
  const std::string file = (std::filesystem::path(state_dir) / kStateFileName).string();
  std::unique_ptr<PrefixRegistry> registry(new PrefixRegistry(file));
  if (std::filesystem::exists(file)) {
    absl::StatusOr<std::string> json = ReadFile(file);
    if (!json.ok()) return json.status();
    absl::StatusOr<v1::PrefixState> state = ParseStateJson(*json, file);
    if (!state.ok()) return state.status();
    registry->persisted_.assign(state->prefixes().begin(), state->prefixes().end());
  }
  return registry;
}

absl::StatusOr<std::vector<v1::RegisterPrefixRequest>> PrefixRegistry::ReadPrefixesFile(
    const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--prefixes-file ", text.status().message()));
  }
  std::string json = *text;
  const bool is_json = std::find_if(json.begin(), json.end(),
                                    [](char c) {
                                      return !std::isspace(static_cast<unsigned char>(c));
                                    }) != json.end() &&
                       json[json.find_first_not_of(" \t\r\n")] == '{';
  if (!is_json) {
    try {
      json = YamlToJson(YAML::Load(*text)).dump();
    } catch (const YAML::Exception& e) {
      return absl::InvalidArgumentError(
          absl::StrCat("--prefixes-file ", path, ": not JSON or YAML: ", e.what()));
    }
  }
  absl::StatusOr<v1::PrefixState> state = ParseStateJson(json, "--prefixes-file " + path);
  if (!state.ok()) return state.status();
  return std::vector<v1::RegisterPrefixRequest>(state->prefixes().begin(), state->prefixes().end());
}

absl::Status PrefixRegistry::Put(const v1::RegisterPrefixRequest& request,
                                 const v1::PrefixOptions& options) {
  absl::MutexLock lock(&mu_);
  if (!requests_.contains(request.name())) order_.push_back(request.name());
  requests_[request.name()] = request;
  options_[request.name()] = options;
  return Write();
}

absl::Status PrefixRegistry::Remove(const std::string& name) {
  absl::MutexLock lock(&mu_);
  if (requests_.erase(name) == 0) return absl::OkStatus();
  options_.erase(name);
  order_.erase(std::find(order_.begin(), order_.end(), name));
  return Write();
}

std::optional<v1::PrefixOptions> PrefixRegistry::Options(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = options_.find(name);
  if (it == options_.end()) return std::nullopt;
  return it->second;
}

absl::Status PrefixRegistry::Write() {
  if (state_file_.empty()) return absl::OkStatus();
  v1::PrefixState state;
  for (const std::string& name : order_) *state.add_prefixes() = requests_.at(name);
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  const auto status = google::protobuf::util::MessageToJsonString(state, &json, options);
  if (!status.ok()) return absl::InternalError(status.ToString());
  return WriteAtomically(state_file_, json);
}

}  // namespace kvserve::server
