// PrefixRegistry: prefix definitions in memory and in an atomically replaced state file.
#include "server/prefix_registry.h"

#include <fcntl.h>
#include <google/protobuf/util/json_util.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/parser.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <sstream>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace kvserve::server {
namespace {

constexpr char kStateFileName[] = "prefixes.json";
// Prefix files are read whole; far more than any deployment's prefixes need.
constexpr int64_t kMaxFileBytes = int64_t{256} << 20;
// What YAML aliases may expand to: each alias re-reads its anchored node, so a few lines of
// nested aliases ("billion laughs") can stand for 10^9 nodes.
constexpr int64_t kMaxYamlNodes = int64_t{1} << 22;
constexpr int64_t kMaxYamlScalarBytes = kMaxFileBytes;

// What a non-regular file is, for the error that refuses it.
const char* FileKind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "a special file";
}

// The whole regular file at `path`. NotFound when it does not exist; InvalidArgument for a
// special file (a link to /dev/zero, a FIFO, a directory) or one over kMaxFileBytes; Internal
// for other errors. Messages start with the path.
absl::StatusOr<std::string> ReadFile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    std::string message = absl::StrCat(path, ": cannot open: ", std::strerror(err));
    if (err == ENOENT || err == ENOTDIR) return absl::NotFoundError(message);
    return absl::InternalError(message);
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a regular file (", FileKind(st.st_mode), ")"));
  }
  // O_NONBLOCK: a FIFO swapped in after the stat cannot block the open; fstat refuses it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    return absl::InternalError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  std::string text;
  absl::Status status;
  if (::fstat(fd, &st) != 0) {
    status = absl::InternalError(absl::StrCat(path, ": cannot stat: ", std::strerror(errno)));
  } else if (!S_ISREG(st.st_mode)) {
    status = absl::InvalidArgumentError(
        absl::StrCat(path, ": not a regular file (", FileKind(st.st_mode), ")"));
  } else if (st.st_size > kMaxFileBytes) {
    status =
        absl::InvalidArgumentError(absl::StrCat(path, ": ", st.st_size, " bytes is more than the ",
                                                kMaxFileBytes, " bytes (256 MiB) allowed"));
  } else {
    char buffer[1 << 16];
    while (true) {
      const ssize_t n = ::read(fd, buffer, sizeof(buffer));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        status = absl::InternalError(absl::StrCat(path, ": cannot read: ", std::strerror(errno)));
        break;
      }
      if (n == 0) break;
      text.append(buffer, static_cast<size_t>(n));
      if (static_cast<int64_t>(text.size()) > kMaxFileBytes) {  // grew while being read
        status = absl::InvalidArgumentError(
            absl::StrCat(path, ": more than the ", kMaxFileBytes, " bytes (256 MiB) allowed"));
        break;
      }
    }
  }
  ::close(fd);
  if (!status.ok()) return status;
  return text;
}

// Counts what a YAML document expands to, aliases expanded, without building it: each
// anchor's expanded size is recorded when its node ends and added again at every alias.
// Throws ExpansionTooLarge (a YAML::Exception) past kMaxYamlNodes or kMaxYamlScalarBytes.
class ExpansionCounter : public YAML::EventHandler {
 public:
  struct Size {
    int64_t nodes = 0;
    int64_t bytes = 0;
  };
  class ExpansionTooLarge : public YAML::Exception {
   public:
    explicit ExpansionTooLarge(const YAML::Mark& mark, const std::string& message)
        : YAML::Exception(mark, message) {}
  };

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    Leaf(mark, anchor, {1, 0});
  }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    auto it = anchors_.find(anchor);
    // An alias to a node still open (a cycle) is refused by the parser itself.
    Add(mark, it == anchors_.end() ? Size{1, 0} : it->second);
  }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                const std::string& value) override {
    Leaf(mark, anchor, {1, static_cast<int64_t>(value.size())});
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    Open(mark, anchor);
  }
  void OnSequenceEnd() override { Close(); }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    Open(mark, anchor);
  }
  void OnMapEnd() override { Close(); }

 private:
  struct Frame {
    YAML::anchor_t anchor;
    Size size;
    YAML::Mark mark;
  };

  void Leaf(const YAML::Mark& mark, YAML::anchor_t anchor, Size size) {
    if (anchor != YAML::NullAnchor) anchors_[anchor] = size;
    Add(mark, size);
  }
  void Open(const YAML::Mark& mark, YAML::anchor_t anchor) {
    open_.push_back({anchor, {1, 0}, mark});
  }
  void Close() {
    Frame frame = open_.back();
    open_.pop_back();
    if (frame.anchor != YAML::NullAnchor) anchors_[frame.anchor] = frame.size;
    Add(frame.mark, frame.size);
  }
  // Adds `size` to the innermost open node (or the document); sizes are checked as they grow,
  // so no sum can overflow.
  void Add(const YAML::Mark& mark, Size size) {
    Size& total = open_.empty() ? document_ : open_.back().size;
    total.nodes += size.nodes;
    total.bytes += size.bytes;
    if (total.nodes > kMaxYamlNodes) {
      throw ExpansionTooLarge(
          mark, absl::StrCat("aliases expand the document past ", kMaxYamlNodes, " nodes"));
    }
    if (total.bytes > kMaxYamlScalarBytes) {
      throw ExpansionTooLarge(mark, absl::StrCat("aliases expand the document past ",
                                                 kMaxYamlScalarBytes, " bytes of text"));
    }
  }

  std::map<YAML::anchor_t, Size> anchors_;
  std::vector<Frame> open_;
  Size document_;
};

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

// Expands `text` (YAML) to JSON text, refusing documents whose aliases expand past the
// bounds. Throws YAML::Exception for malformed YAML or too large an expansion.
std::string YamlTextToJson(const std::string& text) {
  {
    std::istringstream in(text);
    YAML::Parser parser(in);
    ExpansionCounter counter;
    parser.HandleNextDocument(counter);  // YAML::Load reads only the first document too
  }
  return YamlToJson(YAML::Load(text))
      .dump(-1, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::strict);
}

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
  const size_t first = json.find_first_not_of(" \t\r\n");
  const bool is_json = first != std::string::npos && json[first] == '{';
  if (!is_json) {
    try {
      json = YamlTextToJson(*text);
    } catch (const YAML::Exception& e) {
      return absl::InvalidArgumentError(
          absl::StrCat("--prefixes-file ", path, ": not JSON or YAML: ", e.what()));
    } catch (const nlohmann::json::exception&) {  // the only one dump throws
      return absl::InvalidArgumentError(
          absl::StrCat("--prefixes-file ", path, ": YAML text is not valid UTF-8"));
    }
  }
  absl::StatusOr<v1::PrefixState> state = ParseStateJson(json, "--prefixes-file " + path);
  if (!state.ok()) return state.status();
  return std::vector<v1::RegisterPrefixRequest>(state->prefixes().begin(), state->prefixes().end());
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
