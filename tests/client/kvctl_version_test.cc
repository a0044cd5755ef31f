// Tests of kvctl --version's text: the version, the commit, and what the client links.
#include "client/kvctl_version.h"

#include <grpcpp/grpcpp.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kvserve::client {
namespace {

using ::testing::ContainsRegex;
using ::testing::EndsWith;
using ::testing::HasSubstr;

TEST(KvctlVersionTest, NamesTheVersionTheCommitAndNoLibTorch) {
  const std::string text = KvctlVersionText();
  // The revision is a commit (with -dirty for a modified checkout) or "unknown" outside git.
  EXPECT_THAT(text, ContainsRegex("^kvctl [0-9]+\\.[0-9]+\\.[0-9]+ \\(git ([0-9a-f]{7,40}(-dirty)?|"
                                  "unknown)\\)\n"));
  EXPECT_THAT(text,
              HasSubstr("\nclient: no LibTorch, no CUDA (gRPC " + grpc::Version() + ", protobuf "));
  EXPECT_THAT(text, EndsWith(")\n"));
}

}  // namespace
}  // namespace kvserve::client
