// Model files from a folder (mmap) or from memory (shared strings).
#include "base/model_source.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/regular_file.h"
#include "base/string_cat.h"

namespace kvserve::base {
namespace {

constexpr std::string_view kInMemoryName = "<in-memory model>";

// Relative names only: no empty names, absolute paths or ".." components.
absl::Status CheckFileName(std::string_view file) {
  if (file.empty()) return absl::InvalidArgumentError("empty model file name");
  if (file.front() == '/' || file.find('\0') != std::string_view::npos) {
    return absl::InvalidArgumentError(Cat("model file name '", file, "' must be a relative path"));
  }
  for (const auto& part : std::filesystem::path(std::string(file))) {
    if (part == "..") {
      return absl::InvalidArgumentError(Cat("model file name '", file, "' must not contain '..'"));
    }
  }
  return absl::OkStatus();
}

absl::Status ErrnoError(int err, std::string_view what, const std::string& path) {
  std::string message = Cat(path, ": ", what, ": ", std::strerror(err));
  if (err == ENOENT || err == ENOTDIR) return absl::NotFoundError(message);
  return absl::InternalError(message);
}

// Closes a file descriptor on scope exit.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() { ::close(fd_); }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;

 private:
  int fd_;
};

}  // namespace

MappedFile::MappedFile(std::string name, void* mapping, size_t mapping_size, std::string owned)
    : name_(std::move(name)),
      mapping_(mapping),
      mapping_size_(mapping_size),
      owned_(std::move(owned)) {}

MappedFile::~MappedFile() {
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_size_);
}

absl::StatusOr<std::shared_ptr<const MappedFile>> MappedFile::Open(const std::string& path) {
  // Refused before open where possible (opening some devices has effects); O_NONBLOCK so
  // that a FIFO swapped in meanwhile cannot block the open, and fstat decides in the end.
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return ErrnoError(errno, "cannot stat", path);
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        Cat(path, ": not a regular file (", FileKind(st.st_mode), ")"));
  }
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return ErrnoError(errno, "cannot open", path);
  FdCloser closer(fd);
  if (::fstat(fd, &st) != 0) return ErrnoError(errno, "cannot stat", path);
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        Cat(path, ": not a regular file (", FileKind(st.st_mode), ")"));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  void* mapping = nullptr;
  if (size > 0) {  // mmap refuses length 0; an empty file is an empty span
    mapping = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (mapping == MAP_FAILED) return ErrnoError(errno, "cannot mmap", path);
  }
  return std::shared_ptr<const MappedFile>(new MappedFile(path, mapping, size, std::string()));
}

std::shared_ptr<const MappedFile> MappedFile::FromString(std::string name, std::string contents) {
  return std::shared_ptr<const MappedFile>(
      new MappedFile(std::move(name), nullptr, 0, std::move(contents)));
}

std::span<const uint8_t> MappedFile::bytes() const {
  if (mapping_ != nullptr) return {static_cast<const uint8_t*>(mapping_), mapping_size_};
  return {reinterpret_cast<const uint8_t*>(owned_.data()), owned_.size()};
}

absl::StatusOr<ModelSource> ModelSource::FromDirectory(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return absl::NotFoundError(Cat("model folder '", dir, "' is not a directory"));
  }
  return ModelSource(dir, nullptr);
}

ModelSource ModelSource::FromMemory(std::map<std::string, std::string> files) {
  auto memory = std::make_shared<MemoryFiles>();
  for (auto& [name, contents] : files) {
    std::string display = Cat(kInMemoryName, "/", name);
    memory->emplace(name, MappedFile::FromString(std::move(display), std::move(contents)));
  }
  return ModelSource(std::string(), std::move(memory));
}

std::string ModelSource::PathOf(std::string_view file) const {
  if (memory_ != nullptr) return Cat(kInMemoryName, "/", file);
  return (std::filesystem::path(dir_) / std::string(file)).string();
}

bool ModelSource::Has(std::string_view file) const {
  if (!CheckFileName(file).ok()) return false;
  if (memory_ != nullptr) return memory_->find(file) != memory_->end();
  std::error_code ec;
  return std::filesystem::exists(PathOf(file), ec);
}

absl::StatusOr<std::string> ModelSource::ReadText(std::string_view file) const {
  absl::StatusOr<std::shared_ptr<const MappedFile>> mapped = Map(file);
  if (!mapped.ok()) return mapped.status();
  std::span<const uint8_t> bytes = (*mapped)->bytes();
  if (bytes.size() > kMaxTextFileBytes) {
    return absl::InvalidArgumentError(Cat((*mapped)->name(), ": ", bytes.size(),
                                          " bytes is more than the ", kMaxTextFileBytes,
                                          " bytes (256 MiB) a JSON file may have"));
  }
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

absl::StatusOr<std::shared_ptr<const MappedFile>> ModelSource::Map(std::string_view file) const {
  if (absl::Status status = CheckFileName(file); !status.ok()) {
    return absl::InvalidArgumentError(Cat(Describe(), ": ", status.message()));
  }
  if (memory_ != nullptr) {
    auto it = memory_->find(file);
    if (it == memory_->end()) {
      return absl::NotFoundError(Cat(PathOf(file), ": no such file"));
    }
    return it->second;
  }
  return MappedFile::Open(PathOf(file));
}

std::string ModelSource::Describe() const {
  return memory_ != nullptr ? std::string(kInMemoryName) : dir_;
}

}  // namespace kvserve::base
