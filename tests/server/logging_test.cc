// Tests of JsonEscape (the body of the JSON log format's "msg" string), TextEscape and the
// access-log line in both formats, whatever bytes the fields hold; gRPC's and protobuf's own
// lines go through the logger.
#include "server/logging.h"

#include <gmock/gmock.h>
#include <grpc/support/log.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "kvserve/v1/generation.pb.h"

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

TEST(LoggingTest, BytesThatAreNotUtf8BecomeReplacementCharacters) {
  EXPECT_EQ(JsonEscape("a\xff"
                       "b"),
            R"(a\ufffdb)");
  EXPECT_EQ(JsonEscape("\xc3"), R"(\ufffd)");                      // cut before its continuation
  EXPECT_EQ(JsonEscape("\xc3(\xa9"), R"(\ufffd(\ufffd)");          // lead, then stray continuation
  EXPECT_EQ(JsonEscape("\xc0\xaf"), R"(\ufffd\ufffd)");            // overlong '/'
  EXPECT_EQ(JsonEscape("\xed\xa0\x80"), R"(\ufffd\ufffd\ufffd)");  // a UTF-16 surrogate
  EXPECT_EQ(JsonEscape("\xf4\x90\x80\x80"), R"(\ufffd\ufffd\ufffd\ufffd)");  // > U+10FFFF
  EXPECT_EQ(JsonEscape("\xf4\x8f\xbf\xbf"), "\xf4\x8f\xbf\xbf");             // U+10FFFF itself
}

TEST(LoggingTest, EscapedTextIsAlwaysAValidJsonString) {
  // Every byte value, alone and after a lead byte, parses back as a JSON string.
  for (int a = 0; a < 256; ++a) {
    for (int b : {0x00, 0x41, 0x80, 0xa9, 0xbf, 0xc3, 0xff}) {
      const std::string text = {static_cast<char>(a), static_cast<char>(b), '"'};
      std::string json = "\"";
      json += JsonEscape(text);
      json += '"';
      nlohmann::json parsed;
      ASSERT_NO_THROW(parsed = nlohmann::json::parse(json)) << a << " " << b;
      EXPECT_TRUE(parsed.is_string());
    }
  }
}

TEST(LoggingTest, TextEscapeKeepsOneLineOfUtf8) {
  EXPECT_EQ(TextEscape("plain caf\xc3\xa9"), "plain caf\xc3\xa9");
  EXPECT_EQ(TextEscape("a\nb\rc\td"), R"(a\nb\rc\td)");
  EXPECT_EQ(TextEscape("x\x01\x7fy\xff"), R"(x\x01\x7fy\xff)");
  EXPECT_EQ(TextEscape(R"(say "hi" \)"), R"(say "hi" \)");
  EXPECT_EQ(TextEscape(R"(say "hi" \)", /*quoted=*/true), R"(say \"hi\" \\)");
}

AccessRecord HostileRecord() {
  AccessRecord r;
  r.request_id = "req-1";
  r.tenant = "default";
  r.method = "Generate";
  r.peer = "ipv4:127.0.0.1:5000";
  r.outcome = "not_found";
  r.code = "NOT_FOUND";
  // An error quoting a caller's string cut inside a character, with controls and quotes.
  r.error = std::string("session: no open session 'a\n\"}\\\x01\xc3' (closed)");
  r.prompt_tokens = 5;
  r.cached_tokens = 2;
  r.completion_tokens = 3;
  r.queue_ms = 1.5;
  r.ttft_ms = 12.25;
  r.total_ms = 40;
  return r;
}

TEST(LoggingTest, AccessLogJsonIsOneValidObjectWhateverTheFieldsHold) {
  const AccessRecord record = HostileRecord();
  const std::string members = AccessLogJsonMembers(record);
  EXPECT_EQ(members.find('\n'), std::string::npos);
  const nlohmann::json line = nlohmann::json::parse("{" + members + "}");
  EXPECT_EQ(line["msg"], "access");
  EXPECT_EQ(line["request_id"], "req-1");
  EXPECT_EQ(line["tenant"], "default");
  EXPECT_EQ(line["method"], "Generate");
  EXPECT_EQ(line["peer"], "ipv4:127.0.0.1:5000");
  EXPECT_EQ(line["outcome"], "not_found");
  EXPECT_EQ(line["code"], "NOT_FOUND");
  EXPECT_EQ(line["prompt_tokens"], 5);
  EXPECT_EQ(line["cached_tokens"], 2);
  EXPECT_EQ(line["completion_tokens"], 3);
  EXPECT_DOUBLE_EQ(line["queue_ms"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(line["ttft_ms"].get<double>(), 12.25);
  EXPECT_DOUBLE_EQ(line["total_ms"].get<double>(), 40);
  EXPECT_EQ(line["error"], "session: no open session 'a\n\"}\\\x01\xef\xbf\xbd' (closed)");
  // A success has no error member; a NaN duration is still a number.
  AccessRecord ok = record;
  ok.error.clear();
  ok.total_ms = std::nan("");
  const nlohmann::json ok_line = nlohmann::json::parse("{" + AccessLogJsonMembers(ok) + "}");
  EXPECT_FALSE(ok_line.contains("error"));
  EXPECT_EQ(ok_line["total_ms"], 0);
}

TEST(LoggingTest, AccessLogTextIsOneLineOfKeyValues) {
  const std::string line = AccessLogText(HostileRecord());
  EXPECT_EQ(line,
            "access request_id=req-1 tenant=default method=Generate peer=ipv4:127.0.0.1:5000 "
            "outcome=not_found code=NOT_FOUND prompt_tokens=5 cached_tokens=2 "
            "completion_tokens=3 queue_ms=1.500 ttft_ms=12.250 total_ms=40.000 "
            R"x(error="session: no open session 'a\n\"}\\\x01\xc3' (closed)")x");
  AccessRecord odd = HostileRecord();
  odd.tenant = "two words";
  odd.error.clear();
  EXPECT_THAT(AccessLogText(odd), ::testing::HasSubstr(R"( tenant="two words" )"));
  EXPECT_THAT(AccessLogText(odd), ::testing::EndsWith("total_ms=40.000"));
}

TEST(LoggingTest, AccessLogHoldsOnlyTheFieldsTheCallHas) {
  AccessRecord record;
  record.request_id = "r-1";
  record.tenant = "default";
  record.method = "ListPrefixes";
  record.peer = "ipv4:127.0.0.1:5000";
  record.outcome = "ok";
  record.code = "OK";
  record.total_ms = 2;
  EXPECT_EQ(AccessLogText(record),
            "access request_id=r-1 tenant=default method=ListPrefixes peer=ipv4:127.0.0.1:5000 "
            "outcome=ok code=OK total_ms=2.000");
  nlohmann::json line = nlohmann::json::parse("{" + AccessLogJsonMembers(record) + "}");
  for (const char* field :
       {"prompt_tokens", "cached_tokens", "completion_tokens", "queue_ms", "ttft_ms"}) {
    EXPECT_FALSE(line.contains(field)) << field;
  }
  EXPECT_DOUBLE_EQ(line["total_ms"].get<double>(), 2);

  // A generation refused after parsing: its prompt, nothing it never reached.
  record.method = "Generate";
  record.outcome = "resource_exhausted";
  record.code = "RESOURCE_EXHAUSTED";
  record.prompt_tokens = 4;
  EXPECT_THAT(AccessLogText(record),
              ::testing::EndsWith(" code=RESOURCE_EXHAUSTED prompt_tokens=4 total_ms=2.000"));
  line = nlohmann::json::parse("{" + AccessLogJsonMembers(record) + "}");
  EXPECT_EQ(line["prompt_tokens"], 4);
  EXPECT_FALSE(line.contains("completion_tokens"));
  EXPECT_FALSE(line.contains("ttft_ms"));
}

// Lines written to spdlog's default logger while it lives, as "LEVEL|MESSAGE".
class DefaultLoggerCapture {
 public:
  DefaultLoggerCapture() : previous_(spdlog::default_logger()) {
    auto logger = std::make_shared<spdlog::logger>(
        "capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(stream_));
    logger->set_pattern("%l|%v");
    logger->set_level(spdlog::level::trace);
    spdlog::set_default_logger(logger);
  }
  ~DefaultLoggerCapture() { spdlog::set_default_logger(previous_); }
  std::string text() const { return stream_.str(); }

 private:
  std::ostringstream stream_;
  std::shared_ptr<spdlog::logger> previous_;
};

TEST(LibraryLogsTest, GrpcLinesGoThroughTheLoggerAtTheirLevel) {
  std::string text;
  {
    DefaultLoggerCapture capture;
    RouteLibraryLogs("info");
    gpr_log(GPR_ERROR, "Handshake failed with fatal error %s", "SSL_ERROR_SSL");
    gpr_log(GPR_INFO, "below --log-level info: never formatted");
    RouteLibraryLogs("debug");
    gpr_log(GPR_INFO, "gRPC's machinery");
    text = capture.text();
  }
  RouteLibraryLogs("error");  // the rest of the tests keep gRPC's default threshold
  EXPECT_THAT(text, ::testing::HasSubstr("error|grpc: logging_test.cc:"));
  EXPECT_THAT(text, ::testing::HasSubstr(": Handshake failed with fatal error SSL_ERROR_SSL\n"));
  EXPECT_THAT(text, ::testing::HasSubstr(": gRPC's machinery\n"));
  EXPECT_THAT(text, ::testing::HasSubstr("debug|grpc: logging_test.cc:"));
  EXPECT_THAT(text, ::testing::Not(::testing::HasSubstr("never formatted")));
}

TEST(LibraryLogsTest, ProtobufLinesGoThroughTheLogger) {
  // A request whose prompt (string field 1) is not UTF-8: protobuf refuses it and says why.
  const std::string wire = std::string("\x0a\x02\xff\xfe", 4);
  std::string text;
  {
    DefaultLoggerCapture capture;
    RouteLibraryLogs("info");
    v1::GenerateRequest request;
    EXPECT_FALSE(request.ParseFromString(wire));
    text = capture.text();
  }
  RouteLibraryLogs("error");
  EXPECT_THAT(text, ::testing::HasSubstr("error|protobuf: wire_format_lite.cc:"));
  EXPECT_THAT(text, ::testing::HasSubstr("kvserve.v1.GenerateRequest.prompt"));
  EXPECT_THAT(text, ::testing::HasSubstr("invalid UTF-8"));
}

}  // namespace
}  // namespace kvserve::server
