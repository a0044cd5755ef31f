// Tests of Attached: null (and UNAVAILABLE) until a value is attached, then that value.
#include "server/attached.h"

#include <gtest/gtest.h>

#include <thread>

namespace kvserve::server {
namespace {

struct Served {
  int answer = 0;
};

TEST(AttachedTest, NullUntilAttachedThenTheValue) {
  Attached<Served> attached;
  EXPECT_EQ(attached.get(), nullptr);
  attached.Attach({42});
  ASSERT_NE(attached.get(), nullptr);
  EXPECT_EQ(attached.get()->answer, 42);
}

TEST(AttachedTest, ReadersOnOtherThreadsSeeTheAttachedValue) {
  Attached<Served> attached;
  std::thread writer([&] { attached.Attach({7}); });
  writer.join();
  int seen = 0;
  std::thread reader([&] { seen = attached.get() ? attached.get()->answer : -1; });
  reader.join();
  EXPECT_EQ(seen, 7);
}

TEST(AttachedTest, LoadingIsUnavailable) {
  EXPECT_EQ(ModelLoadingError().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(ToGrpcStatus(ModelLoadingError()).error_code(), grpc::StatusCode::UNAVAILABLE);
}

}  // namespace
}  // namespace kvserve::server
