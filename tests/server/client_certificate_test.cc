// SubjectCommonName: one CN names the tenant; none or two are refused.
#include "server/client_certificate.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kvserve::server {
namespace {

using ::testing::HasSubstr;

// Self-signed P-256 certificates made by `openssl req -x509 -subj SUBJECT`.
constexpr char kTwoCns[] = R"(-----BEGIN CERTIFICATE-----
MIIBmzCCAUGgAwIBAgIUP/TX1abzG2qIFKkGlE8LGw/2zDgwCgYIKoZIzj0EAwIw
IjEOMAwGA1UEAwwFYWxpY2UxEDAOBgNVBAMMB21hbGxvcnkwIBcNMjYxMjA1MTE0
MTA2WhgPMjEyNjExMTExMTQxMDZaMCIxDjAMBgNVBAMMBWFsaWNlMRAwDgYDVQQD
DAdtYWxsb3J5MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAELhiUlR01oNFkm1yP
z7dVs7yEWS0yZRxdXvWgxO8Gz+okSUhrFq/VDNI1F/wSskN9qzGHjccssAjpLsYM
OX4u36NTMFEwHQYDVR0OBBYEFGLltLiP2SSzwjfJ3sKydi5dphy7MB8GA1UdIwQY
MBaAFGLltLiP2SSzwjfJ3sKydi5dphy7MA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZI
zj0EAwIDSAAwRQIgbn7vg2qk+TlyyQ72Iz2EuN4duQlK0xcNTbq+BVElh1oCIQCO
6XM27mFzrM9aqIVH7YIYocOJzbLHFhapptHZgNx4UQ==
-----END CERTIFICATE-----
)";  // /CN=alice/CN=mallory

constexpr char kOneCn[] = R"(-----BEGIN CERTIFICATE-----
MIIBeDCCAR2gAwIBAgIUd5UyHpA33hNPF8THT+4KAAClmMswCgYIKoZIzj0EAwIw
EDEOMAwGA1UEAwwFYWxpY2UwIBcNMjYxMjA1MTE0MTA3WhgPMjEyNjExMTExMTQx
MDdaMBAxDjAMBgNVBAMMBWFsaWNlMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE
ck/JqLgAjgBpOGCDYBNcI3i33MFu3EDr9++3gBQq/IRsv0x3oawpbs6/2BpeiY9w
mkwR2etcYU6QJxJopaPveaNTMFEwHQYDVR0OBBYEFLR6ZnzmsDxd1cNFT9LA9KS5
a27YMB8GA1UdIwQYMBaAFLR6ZnzmsDxd1cNFT9LA9KS5a27YMA8GA1UdEwEB/wQF
MAMBAf8wCgYIKoZIzj0EAwIDSQAwRgIhAPKZdXwvnrWVULvqjzZyIvtSyYv/D9j1
7F/stJ4buighAiEAgB0J3hNNL3RTUC+VBnFM7brYaFHJTfXbe2kOQz7CxHM=
-----END CERTIFICATE-----
)";  // /CN=alice

constexpr char kNoCn[] = R"(-----BEGIN CERTIFICATE-----
MIIBdTCCARugAwIBAgIUT26268QAa+WFtAQo+aiQ66RgPtgwCgYIKoZIzj0EAwIw
DzENMAsGA1UECgwEYWNtZTAgFw0yNjEyMDUxMTQxMDdaGA8yMTI2MTExMTExNDEw
N1owDzENMAsGA1UECgwEYWNtZTBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABNdC
lLXc5K0NIbIm81rWTZCqPTKlGcc7bPIhyujziCuiMKOzzM4YbUez+0eU7LH6r4PW
zJlmDpk8M+YCRnZ0l8ejUzBRMB0GA1UdDgQWBBQZS5AxiLbULIDUViXrW3oADsX3
1jAfBgNVHSMEGDAWgBQZS5AxiLbULIDUViXrW3oADsX31jAPBgNVHRMBAf8EBTAD
AQH/MAoGCCqGSM49BAMCA0gAMEUCIEx6OiZtv4B3b2RrxMj+14Yt2D539WaqXNIO
vNWdYqPsAiEA+kt4r9+wnZ4Dry5PL2zLDnzCQ0r6x3lMYSJR2vsomr4=
-----END CERTIFICATE-----
)";  // /O=acme

TEST(SubjectCommonNameTest, OneCnNamesTheTenant) {
  absl::StatusOr<std::string> cn = SubjectCommonName(kOneCn);
  ASSERT_TRUE(cn.ok()) << cn.status();
  EXPECT_EQ(*cn, "alice");
}

// gRPC's x509_common_name property says "alice" for this certificate: the second CN would
// go unseen.
TEST(SubjectCommonNameTest, TwoCnsAreRefused) {
  absl::StatusOr<std::string> cn = SubjectCommonName(kTwoCns);
  ASSERT_EQ(cn.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(std::string(cn.status().message()), HasSubstr("more than one CN"));
}

TEST(SubjectCommonNameTest, NoCnOrNoCertificateIsRefused) {
  EXPECT_THAT(std::string(SubjectCommonName(kNoCn).status().message()), HasSubstr("no CN"));
  EXPECT_EQ(SubjectCommonName("not a certificate").status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(SubjectCommonName("").status().code(), absl::StatusCode::kUnauthenticated);
}

}  // namespace
}  // namespace kvserve::server
