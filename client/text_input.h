// Text that a kvctl flag names instead of holding it (--prompt-file, prefix register --file):
// read from a file or from standard input ("-"), bounded, and checked to be UTF-8 as the
// request's string fields must be.
#pragma once

#include <cstddef>
#include <istream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kvserve::client {

// The most bytes ReadTextInput takes: far beyond any model's context (and kvserve's default
// --max-request-bytes, 64 MiB), so it bounds only mistakes such as /dev/zero.
inline constexpr size_t kMaxTextInputBytes = size_t{256} << 20;

// The whole content of the file `path`, or of `in` when `path` is "-", exactly as read (a final
// newline included). InvalidArgument naming --`flag` and the path when it cannot be read (a
// missing file, a directory), holds more than `max_bytes` or is not UTF-8.
absl::StatusOr<std::string> ReadTextInput(const std::string& flag, const std::string& path,
                                          std::istream& in, size_t max_bytes = kMaxTextInputBytes);

// OK when `text` is UTF-8 (no overlong forms, surrogates or code points past U+10FFFF, which
// protobuf refuses in a string field); else InvalidArgument "`what`: not UTF-8 text (byte N)"
// with the offset of the first byte that is not.
absl::Status CheckUtf8(absl::string_view what, absl::string_view text);

}  // namespace kvserve::client
