// Tests of the per-call helpers: request ids and the INTERNAL status of escaped exceptions.
#include "server/call_context.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <stdexcept>
#include <string>

namespace kvserve::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(CallContextTest, RequestIdsAreSixteenHexDigitsAndDoNotRepeat) {
  std::set<std::string> seen;
  for (int i = 0; i < 10000; ++i) {
    const std::string id = NewRequestId();
    ASSERT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos) << id;
    ASSERT_EQ(id.size(), 16u);
    seen.insert(id);
  }
  EXPECT_EQ(seen.size(), 10000u);
}

TEST(CallContextTest, AnEscapedExceptionIsInternalNamingTheRequestIdNotItsText) {
  const std::runtime_error error("/srv/secret/path/model.safetensors: boom");
  const absl::Status status = InternalErrorFor("0123456789abcdef", "Generate", &error);
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(status.message(),
            "internal error while serving Generate; the server logged it under request id "
            "0123456789abcdef");
  EXPECT_THAT(std::string(status.message()), Not(HasSubstr("/srv")));
  EXPECT_EQ(InternalErrorFor("x", "Tokenize", nullptr).code(), absl::StatusCode::kInternal);
}

TEST(CallContextTest, ReplicaIdentityIsEmptyUntilSet) {
  ReplicaIdentity replica;
  EXPECT_EQ(replica.Get(), "");
  replica.Set("127.0.0.1:50051");
  EXPECT_EQ(replica.Get(), "127.0.0.1:50051");
}

}  // namespace
}  // namespace kvserve::server
