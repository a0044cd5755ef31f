// ResolveTenantLimits: the --tenant-max-* flags as given, fair shares by default with API keys.
#include "server/tenant_limits.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kvserve::server {
namespace {

using ::testing::HasSubstr;

ServerOptions WithKeys() {
  ServerOptions options;
  options.api_keys_file = "/etc/kvserve/keys.yaml";
  options.max_sessions = 1024;
  options.scheduler.max_queue = 256;
  return options;
}

TEST(TenantLimitsTest, WithoutKeysUnsetLimitsAreNone) {
  ServerOptions options;
  EXPECT_EQ(ResolveTenantLimits(options, 0, 1 << 20), TenantLimits{});
  options.tenant_max_sessions = 5;
  options.tenant_queued_requests = 3;
  options.tenant_prefix_bytes = 4096;
  EXPECT_EQ(ResolveTenantLimits(options, 0, 1 << 20),
            (TenantLimits{.max_sessions = 5, .max_queued_requests = 3, .max_prefix_bytes = 4096}));
}

// Three tenants in the keys file and one share more (the shared namespace, certificate
// tenants): a quarter of each global limit, so no tenant can hold all of it.
TEST(TenantLimitsTest, WithKeysUnsetLimitsAreFairShares) {
  const TenantLimits limits = ResolveTenantLimits(WithKeys(), 3, int64_t{64} << 20);
  EXPECT_EQ(limits.max_sessions, 256);
  EXPECT_EQ(limits.max_queued_requests, 64);
  EXPECT_EQ(limits.max_prefix_bytes, int64_t{16} << 20);
  // One tenant: half.
  EXPECT_EQ(ResolveTenantLimits(WithKeys(), 1, 100).max_sessions, 512);
  // Never 0 (which would mean no limit): at least 1.
  ServerOptions tiny = WithKeys();
  tiny.max_sessions = 2;
  tiny.scheduler.max_queue = 1;
  const TenantLimits small = ResolveTenantLimits(tiny, 5, 3);
  EXPECT_EQ(small,
            (TenantLimits{.max_sessions = 1, .max_queued_requests = 1, .max_prefix_bytes = 1}));
}

TEST(TenantLimitsTest, GivenFlagsWinOverFairShares) {
  ServerOptions options = WithKeys();
  options.tenant_max_sessions = 0;  // 0 given: no limit, even with keys
  options.tenant_queued_requests = 10;
  const TenantLimits limits = ResolveTenantLimits(options, 3, 1000);
  EXPECT_EQ(limits.max_sessions, 0);
  EXPECT_EQ(limits.max_queued_requests, 10);
  EXPECT_EQ(limits.max_prefix_bytes, 250);
}

TEST(TenantLimitsTest, TheStartUpLineSaysWhereLimitsComeFrom) {
  const ServerOptions options = WithKeys();
  const std::string line = DescribeTenantLimits(ResolveTenantLimits(options, 3, 4000), options, 3);
  EXPECT_THAT(line, HasSubstr("256 sessions (--tenant-max-sessions)"));
  EXPECT_THAT(line, HasSubstr("64 queued requests"));
  EXPECT_THAT(line, HasSubstr("1000 prefix bytes"));
  EXPECT_THAT(line, HasSubstr("fair shares among the 3 tenants of --api-keys-file"));
  EXPECT_THAT(DescribeTenantLimits(TenantLimits{}, ServerOptions{}, 0),
              HasSubstr("no limit sessions"));
}

}  // namespace
}  // namespace kvserve::server
