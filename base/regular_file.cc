// The bounded read of a regular file (see regular_file.h).
#include "base/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace kvserve::base {

const char* FileKind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "a special file";
}

namespace {

// "256 MiB", or the bytes when not a whole number of MiB.
std::string Mib(int64_t bytes) {
  if (bytes % (int64_t{1} << 20) == 0) return absl::StrCat(bytes >> 20, " MiB");
  return absl::StrCat(bytes, " bytes");
}

}  // namespace

absl::StatusOr<std::string> ReadRegularFile(const std::string& path, int64_t max_bytes) {
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
  } else if (st.st_size > max_bytes) {
    status = absl::InvalidArgumentError(absl::StrCat(path, ": ", st.st_size,
                                                     " bytes is more than the ", max_bytes,
                                                     " bytes (", Mib(max_bytes), ") allowed"));
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
      if (static_cast<int64_t>(text.size()) > max_bytes) {  // grew while being read
        status = absl::InvalidArgumentError(absl::StrCat(path, ": more than the ", max_bytes,
                                                         " bytes (", Mib(max_bytes), ") allowed"));
        break;
      }
    }
  }
  ::close(fd);
  if (!status.ok()) return status;
  return text;
}

}  // namespace kvserve::base
