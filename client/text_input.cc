// Text read from a file or standard input for a flag (see text_input.h).
#include "client/text_input.h"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"

namespace kvserve::client {
namespace {

// Offset of the first byte of `text` that does not start or continue a well-formed UTF-8
// sequence (RFC 3629's table); text.size() when every byte does.
size_t FirstInvalidUtf8Byte(absl::string_view text) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  size_t i = 0;
  while (i < text.size()) {
    const uint8_t lead = byte(i);
    if (lead < 0x80) {
      ++i;
      continue;
    }
    // The sequence's length and the range of its second byte, which rules out overlong forms,
    // surrogates (ED A0..BF) and code points past U+10FFFF (F4 90..).
    size_t length = 0;
    uint8_t low = 0x80;
    uint8_t high = 0xbf;
    if (lead >= 0xc2 && lead <= 0xdf) {
      length = 2;
    } else if (lead >= 0xe0 && lead <= 0xef) {
      length = 3;
      if (lead == 0xe0) low = 0xa0;
      if (lead == 0xed) high = 0x9f;
    } else if (lead >= 0xf0 && lead <= 0xf4) {
      length = 4;
      if (lead == 0xf0) low = 0x90;
      if (lead == 0xf4) high = 0x8f;
    } else {
      return i;
    }
    if (i + 1 >= text.size() || byte(i + 1) < low || byte(i + 1) > high) return i;
    for (size_t k = 2; k < length; ++k) {
      if (i + k >= text.size() || (byte(i + k) & 0xc0) != 0x80) return i;
    }
    i += length;
  }
  return i;
}

}  // namespace

absl::StatusOr<std::string> ReadTextInput(const std::string& flag, const std::string& path,
                                          std::istream& in, size_t max_bytes) {
  const std::string what = absl::StrCat("--", flag, " '", path, "'");
  const auto cannot_read = [&](int error_number) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": cannot read '", path, "': ", std::strerror(error_number)));
  };
  const auto too_large = [&] {
    return absl::InvalidArgumentError(absl::StrCat(what, ": larger than ", max_bytes, " bytes"));
  };
  std::string content;
  char buffer[1 << 16];
  if (path == "-") {
    while (in.read(buffer, sizeof(buffer)) || in.gcount() > 0) {
      content.append(buffer, static_cast<size_t>(in.gcount()));
      if (content.size() > max_bytes) return too_large();
    }
    if (in.bad()) return cannot_read(errno);
  } else {
    // A directory opens on Linux and fails on the first read, which ferror reports.
    std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
    if (file == nullptr) return cannot_read(errno);
    size_t n = 0;
    while ((n = std::fread(buffer, 1, sizeof(buffer), file.get())) > 0) {
      content.append(buffer, n);
      if (content.size() > max_bytes) return too_large();
    }
    if (std::ferror(file.get())) return cannot_read(errno);
  }
  if (absl::Status utf8 = CheckUtf8(what, content); !utf8.ok()) return utf8;
  return content;
}

absl::Status CheckUtf8(absl::string_view what, absl::string_view text) {
  const size_t bad = FirstInvalidUtf8Byte(text);
  if (bad == text.size()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, ": not UTF-8 text (byte ", bad, ")"));
}

}  // namespace kvserve::client
