// Tests of the raw-bytes codec the services use: round trips and refusals naming the message.
#include "server/grpc_api/wire_codec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "kvserve/v1/generation.pb.h"

namespace kvserve::server::grpc_api {
namespace {

using ::testing::StartsWith;

grpc::ByteBuffer Buffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

TEST(WireCodecTest, RoundTrip) {
  v1::GenerateRequest request;
  request.set_prompt("héllo");
  request.mutable_sampling()->set_max_new_tokens(7);
  grpc::ByteBuffer raw;
  ASSERT_TRUE(SerializeWireMessage(request, &raw).ok());
  v1::GenerateRequest parsed;
  parsed.set_prefix("left over from before");
  ASSERT_TRUE(ParseWireMessage(raw, &parsed).ok());
  EXPECT_EQ(parsed.prompt(), "héllo");
  EXPECT_EQ(parsed.sampling().max_new_tokens(), 7);
  EXPECT_EQ(parsed.prefix(), "");
  // Parsing does not consume the buffer.
  v1::GenerateRequest again;
  ASSERT_TRUE(ParseWireMessage(raw, &again).ok());
  EXPECT_EQ(again.prompt(), "héllo");
}

TEST(WireCodecTest, MalformedBytesAndInvalidUtf8NameTheMessage) {
  v1::GenerateRequest parsed;
  absl::Status truncated = ParseWireMessage(Buffer("\x0a\x10short"), &parsed);
  EXPECT_EQ(truncated.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(truncated.message()),
              StartsWith("request: not a valid kvserve.v1.GenerateRequest message"));
  absl::Status utf8 = ParseWireMessage(Buffer(std::string("\x0a\x02\xc3\x28", 4)), &parsed);
  EXPECT_EQ(utf8.code(), absl::StatusCode::kInvalidArgument);
  v1::TokenizeRequest tokenize;
  EXPECT_THAT(std::string(ParseWireMessage(Buffer("\xff\xff"), &tokenize).message()),
              StartsWith("request: not a valid kvserve.v1.TokenizeRequest message"));
}

// A request cut off because its call ended (the deadline passed during the upload, the
// client went away) is not a malformed request (issue 27 item 16).
TEST(WireCodecTest, ARequestCutOffByTheCallsEndIsNotMalformed) {
  v1::GenerateRequest parsed;
  const absl::Status cut = ParseWireMessage(Buffer("\x0a\x10short"), &parsed);
  ASSERT_EQ(cut.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(UnparsedRequestStatus(cut, /*call_ended=*/false, /*deadline_passed=*/false), cut);
  const absl::Status expired = UnparsedRequestStatus(cut, true, true);
  EXPECT_EQ(expired.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(expired.message()),
              StartsWith("the call's deadline passed before its request was received whole"));
  EXPECT_EQ(UnparsedRequestStatus(cut, true, false).code(), absl::StatusCode::kCancelled);
}

TEST(WireCodecTest, AnEmptyBufferIsTheEmptyMessage) {
  v1::GetModelInfoRequest request;
  EXPECT_TRUE(ParseWireMessage(Buffer(""), &request).ok());
}

}  // namespace
}  // namespace kvserve::server::grpc_api
