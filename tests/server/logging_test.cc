// Tests of JsonEscape, the body of the JSON log format's "msg" string.
#include "server/logging.h"

#include <gtest/gtest.h>

#include <string>

namespace kvserve::server {
namespace {

TEST(LoggingTest, PlainTextIsUnchanged) {
  EXPECT_EQ(JsonEscape(""), "");
  EXPECT_EQ(JsonEscape("serving tiny on cpu: 2 layers"), "serving tiny on cpu: 2 layers");
}

TEST(LoggingTest, QuotesAndBackslashesAreEscaped) {
  EXPECT_EQ(JsonEscape(R"(prefix "sys" at C:\tmp)"), R"(prefix \"sys\" at C:\\tmp)");
  EXPECT_EQ(JsonEscape("\\\""), R"(\\\")");
}

TEST(LoggingTest, NewlinesCarriageReturnsAndTabsUseShortEscapes) {
  EXPECT_EQ(JsonEscape("a\nb\r\nc\td"), R"(a\nb\r\nc\td)");
}

TEST(LoggingTest, OtherControlCharactersUseUnicodeEscapes) {
  EXPECT_EQ(JsonEscape("x\x01y"), R"(x\u0001y)");
  EXPECT_EQ(JsonEscape("\x1f"), R"(\u001f)");
  EXPECT_EQ(JsonEscape(std::string("a\0b", 3)), R"(a\u0000b)");
}

TEST(LoggingTest, Utf8PassesThroughByteForByte) {
  const std::string text = "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80";  // café € 😀
  EXPECT_EQ(JsonEscape(text), text);
  EXPECT_EQ(JsonEscape("\x7f"), "\x7f");  // DEL is not a JSON control character
}

}  // namespace
}  // namespace kvserve::server
