// PrefixRegistry: prefix definitions in memory and in an atomically replaced state file.
#include "server/prefix_registry.h"

#include <fcntl.h>
#include <google/protobuf/util/json_util.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/prefixes_file.h"

namespace kvserve::server {
namespace {

constexpr char kStateFileName[] = "prefixes.json";

// Writes `data` to `path` durably: temporary file, fsync, rename, fsync of the directory.
// On failure returns the errno and sets `*failed` to the step and file that failed (for the
// server's log: it holds server paths); a temporary file left behind is removed.
int WriteAtomically(const std::string& path, const std::string& data, std::string* failed) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    *failed = absl::StrCat("create ", tmp);
    return errno;
  }
  auto fail = [&](std::string step) {
    const int err = errno != 0 ? errno : EIO;
    ::unlink(tmp.c_str());
    *failed = std::move(step);
    return err;
  };
  size_t written = 0;
  while (written < data.size()) {
    const ssize_t n = ::write(fd, data.data() + written, data.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      const int err = fail(absl::StrCat("write ", tmp));
      ::close(fd);
      return err;
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const int err = fail(absl::StrCat("fsync ", tmp));
    ::close(fd);
    return err;
  }
  if (::close(fd) != 0) return fail(absl::StrCat("close ", tmp));
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return fail(absl::StrCat("rename ", tmp, " to ", path));
  }
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const int dir_fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
  return 0;
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
    absl::StatusOr<std::string> json = ReadPrefixFileBytes(file);
    if (!json.ok()) return json.status();
    absl::StatusOr<v1::PrefixState> state = ParsePrefixState(*json, file);
    if (!state.ok()) return state.status();
    registry->persisted_.assign(state->prefixes().begin(), state->prefixes().end());
  }
  return registry;
}

absl::StatusOr<std::vector<v1::RegisterPrefixRequest>> PrefixRegistry::ReadPrefixesFile(
    const std::string& path) {
  return server::ReadPrefixesFile(path);
}

absl::Status PrefixRegistry::Put(const v1::RegisterPrefixRequest& request,
                                 const v1::PrefixOptions& options) {
  absl::MutexLock lock(&mu_);
  const bool known = requests_.contains(request.name());
  v1::PrefixState next;
  for (const std::string& name : order_) {
    *next.add_prefixes() = name == request.name() ? request : requests_.at(name);
  }
  if (!known) *next.add_prefixes() = request;
  if (absl::Status saved = Save(next); !saved.ok()) return saved;
  if (!known) order_.push_back(request.name());
  requests_[request.name()] = request;
  options_[request.name()] = options;
  return absl::OkStatus();
}

absl::Status PrefixRegistry::Remove(const std::string& name) {
  absl::MutexLock lock(&mu_);
  if (!requests_.contains(name)) return absl::OkStatus();
  v1::PrefixState next;
  for (const std::string& other : order_) {
    if (other != name) *next.add_prefixes() = requests_.at(other);
  }
  if (absl::Status saved = Save(next); !saved.ok()) return saved;
  requests_.erase(name);
  options_.erase(name);
  order_.erase(std::find(order_.begin(), order_.end(), name));
  return absl::OkStatus();
}

std::optional<v1::PrefixOptions> PrefixRegistry::Options(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = options_.find(name);
  if (it == options_.end()) return std::nullopt;
  return it->second;
}

absl::Status PrefixRegistry::Save(const v1::PrefixState& state) const {
  if (state_file_.empty()) return absl::OkStatus();
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  const auto status = google::protobuf::util::MessageToJsonString(state, &json, options);
  if (!status.ok()) {
    return absl::InternalError(
        absl::StrCat("could not save the prefix state: ", status.ToString()));
  }
  std::string failed;
  if (const int err = WriteAtomically(state_file_, json, &failed); err != 0) {
    // Clients see the reason only; the paths are the server's business.
    spdlog::error("could not save the prefix state: {}: {}", failed, std::strerror(err));
    return absl::InternalError(
        absl::StrCat("could not save the prefix state: ", std::strerror(err)));
  }
  return absl::OkStatus();
}

}  // namespace kvserve::server
