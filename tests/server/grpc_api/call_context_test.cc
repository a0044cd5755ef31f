// Tests of the per-call helpers: request ids and the INTERNAL status of escaped exceptions.
#include "server/grpc_api/call_context.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <stdexcept>
#include <string>

namespace kvserve::server::grpc_api {
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

TEST(CallContextTest, AClientRequestIdIsKeptOnlyWhenItIsShortAndPlain) {
  EXPECT_EQ(RequestIdFor("abc-DEF_1.2:3"), "abc-DEF_1.2:3");
  EXPECT_EQ(RequestIdFor(std::string(64, 'x')), std::string(64, 'x'));
  for (const std::string& bad :
       {std::string(), std::string(65, 'x'), std::string("has space"), std::string("quo\"te"),
        std::string("new\nline"), std::string("caf\xc3\xa9"), std::string("nul\0", 4)}) {
    const std::string id = RequestIdFor(bad);
    EXPECT_EQ(id.size(), 16u) << bad;
    EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos) << id;
  }
}

TEST(CallRecordTest, StartsInTheDefaultTenantUncountedAndWithoutUsage) {
  CallRecord record("id-1", "Generate", "ipv4:127.0.0.1:1");
  EXPECT_EQ(record.request_id(), "id-1");
  EXPECT_EQ(record.method(), "Generate");
  EXPECT_EQ(record.peer(), "ipv4:127.0.0.1:1");
  EXPECT_EQ(record.tenant(), "default");
  EXPECT_FALSE(record.counted_by_engine());
  EXPECT_FALSE(record.generation().has_value());
  record.SetTenant("team-a");
  record.MarkCountedByEngine();
  record.SetGeneration({.finish_reason = "stop", .prompt_tokens = 7, .completion_tokens = 2});
  EXPECT_EQ(record.tenant(), "team-a");
  EXPECT_TRUE(record.counted_by_engine());
  ASSERT_TRUE(record.generation().has_value());
  EXPECT_EQ(record.generation()->finish_reason, "stop");
  EXPECT_EQ(record.generation()->prompt_tokens, 7);
  EXPECT_EQ(record.generation()->completion_tokens, 2);
  // Nobody authenticated: the admin role; an authenticated caller brings its own.
  EXPECT_EQ(record.role(), Role::kAdmin);
  record.SetPrincipal({.tenant = "team-b", .role = Role::kUser});
  EXPECT_EQ(record.tenant(), "team-b");
  EXPECT_EQ(record.role(), Role::kUser);
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
}  // namespace kvserve::server::grpc_api
