// Prefix files: the --prefixes-file reader (JSON or YAML shaped as kvserve.v1.PrefixState) and
// the bounded read of a regular file that every file of prefixes (state files too) goes through.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kvserve/v1/prefix.pb.h"

namespace kvserve::server {

// Files of prefixes are read whole; far more than any deployment's prefixes need.
inline constexpr int64_t kMaxPrefixFileBytes = int64_t{256} << 20;

// The whole regular file at `path`. NotFound when it does not exist; InvalidArgument for a
// special file (a link to /dev/zero, a FIFO, a directory) or one over kMaxPrefixFileBytes;
// Internal for other errors. Messages start with the path. Any thread.
absl::StatusOr<std::string> ReadPrefixFileBytes(const std::string& path);

// `json` in the proto3 JSON mapping of kvserve.v1.PrefixState. InvalidArgument
// "<what>: not a kvserve.v1.PrefixState: <reason>" when it does not parse.
absl::StatusOr<v1::PrefixState> ParsePrefixState(const std::string& json, const std::string& what);

// Reads a --prefixes-file: JSON or YAML shaped as kvserve.v1.PrefixState ({"prefixes":
// [{"name": ..., "text": ...}, ...]}), in file order. InvalidArgument naming the file and the
// problem, including a file that is not a regular file, one over 256 MiB, and YAML whose
// aliases expand past 2^22 nodes or 256 MiB of text ("billion laughs"). Any thread.
absl::StatusOr<std::vector<v1::RegisterPrefixRequest>> ReadPrefixesFile(const std::string& path);

// What ReadPrefixesFile does with the file's `text` once read; `path` only names it in errors.
absl::StatusOr<std::vector<v1::RegisterPrefixRequest>> ParsePrefixesText(const std::string& text,
                                                                         const std::string& path);

}  // namespace kvserve::server
