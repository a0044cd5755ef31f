// ReadRegularFile: the whole of a regular file, bounded, for every file a server reads whole
// (prefixes, its state journal, API keys).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace kvserve::base {

// The whole regular file at `path`. NotFound when it does not exist; InvalidArgument for a
// special file (a link to /dev/zero, a FIFO, a directory) or one over `max_bytes` (also when it
// grows past them while being read); Internal for other errors. Messages start with the path.
// Any thread.
absl::StatusOr<std::string> ReadRegularFile(const std::string& path, int64_t max_bytes);

// What a file that is not a regular one is ("a directory", "a FIFO", ...), for the errors that
// refuse it; `mode` is a stat st_mode.
const char* FileKind(mode_t mode);

}  // namespace kvserve::base
