// Tests of the text a flag names (ReadTextInput: a file or standard input, bounded, UTF-8) and of
// the UTF-8 check.
#include "client/text_input.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kvserve::client {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// A file under the test's temporary directory holding `content`; its path.
std::string WriteTempFile(const std::string& name, const std::string& content) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

TEST(ReadTextInputTest, AFileIsReadWholeAndAsIs) {
  const std::string content = "line one\r\nline two\n\n\t\xe2\x82\xac end\n";
  const std::string path = WriteTempFile("text_input_file.txt", content);
  std::istringstream unused("not this");
  absl::StatusOr<std::string> text = ReadTextInput("prompt-file", path, unused);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, content);
  std::remove(path.c_str());
}

TEST(ReadTextInputTest, DashReadsTheStream) {
  // Longer than one read buffer, so that the loop's appends are exercised.
  const std::string content = std::string(200'000, 'x') + "\n";
  std::istringstream in(content);
  absl::StatusOr<std::string> text = ReadTextInput("prompt-file", "-", in);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, content);

  std::istringstream empty("");
  EXPECT_EQ(*ReadTextInput("prompt-file", "-", empty), "");
}

TEST(ReadTextInputTest, WhatCannotBeReadNamesTheFlagAndThePath) {
  std::istringstream in;
  const std::string missing = ::testing::TempDir() + "text_input_no_such_file.txt";
  absl::Status status = ReadTextInput("prompt-file", missing, in).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "--prompt-file: cannot read '" + missing + "': No such file or directory");
  // A directory opens, then fails to read.
  status = ReadTextInput("file", ::testing::TempDir(), in).status();
  EXPECT_THAT(std::string(status.message()),
              StartsWith("--file: cannot read '" + ::testing::TempDir() + "'"));
}

TEST(ReadTextInputTest, MoreThanTheLimitIsRefused) {
  const std::string path = WriteTempFile("text_input_large.txt", std::string(11, 'a'));
  std::istringstream in(std::string(11, 'b'));
  EXPECT_EQ(*ReadTextInput("prompt-file", path, in, /*max_bytes=*/11), std::string(11, 'a'));
  EXPECT_EQ(ReadTextInput("prompt-file", path, in, /*max_bytes=*/10).status().message(),
            "--prompt-file '" + path + "': larger than 10 bytes");
  EXPECT_EQ(ReadTextInput("prompt-file", "-", in, /*max_bytes=*/10).status().message(),
            "--prompt-file '-': larger than 10 bytes");
  std::remove(path.c_str());
}

// /dev/zero never ends: the limit ends the read.
TEST(ReadTextInputTest, AnEndlessFileIsRefused) {
  std::istringstream in;
  EXPECT_THAT(
      ReadTextInput("prompt-file", "/dev/zero", in, /*max_bytes=*/1 << 20).status().message(),
      HasSubstr("larger than 1048576 bytes"));
}

TEST(ReadTextInputTest, TextThatIsNotUtf8IsRefused) {
  const std::string path = WriteTempFile("text_input_latin1.txt", "caf\xe9\n");
  std::istringstream in;
  EXPECT_EQ(ReadTextInput("file", path, in).status().message(),
            "--file '" + path + "': not UTF-8 text (byte 3)");
  std::remove(path.c_str());
}

TEST(CheckUtf8Test, WellFormedSequences) {
  for (const std::string text :
       {"", "ascii", "\xc2\x80", "\xdf\xbf", "\xe0\xa0\x80", "\xed\x9f\xbf", "\xee\x80\x80",
        "\xef\xbf\xbf", "\xf0\x90\x80\x80", "\xf4\x8f\xbf\xbf", "caf\xc3\xa9"}) {
    EXPECT_TRUE(CheckUtf8("--x", text).ok()) << ::testing::PrintToString(text);
  }
  EXPECT_TRUE(CheckUtf8("--x", std::string("nul\0inside", 10)).ok());
}

TEST(CheckUtf8Test, TheFirstBadByteIsNamed) {
  const std::vector<std::pair<std::string, int>> cases = {
      {"\x80", 0},              // a continuation byte alone
      {"a\xc0\xaf", 1},         // overlong '/'
      {"ab\xc1\xbf", 2},        // overlong
      {"\xe0\x80\xaf", 0},      // overlong three-byte form
      {"\xed\xa0\x80", 0},      // a surrogate (U+D800)
      {"\xf0\x80\x80\xaf", 0},  // overlong four-byte form
      {"\xf4\x90\x80\x80", 0},  // past U+10FFFF
      {"\xf5\x80\x80\x80", 0},  // no such lead byte
      {"ok\xc3", 2},            // cut short at the end
      {"\xe2\x82", 0},          // cut short
      {"\xe2\x82x", 0},         // a third byte that does not continue
      {"\xc3\xa9\xff", 2},      // 0xFF never appears
  };
  for (const auto& [text, byte] : cases) {
    const absl::Status status = CheckUtf8("--prompt", text);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(status.message(), "--prompt: not UTF-8 text (byte " + std::to_string(byte) + ")")
        << ::testing::PrintToString(text);
  }
}

}  // namespace
}  // namespace kvserve::client
