// Tests of the hints of failed connections: real TLS handshakes against the fake server on
// 127.0.0.1:0 (a TLS port, one requiring client certificates, a plaintext one), each failure
// explained by how the client's channel was secured; other errors get no hint.
#include "client/connection_hint.h"

#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include <grpcpp/grpcpp.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "client/client.h"
#include "client/kvctl_command.h"
#include "client/kvctl_generate.h"
#include "client/request_flags.h"
#include "fake_generation_service.h"

namespace kvserve::client {
namespace {

using testing::FakeServer;
using ::testing::HasSubstr;
using ::testing::Not;

// The contents of testdata/`name` (see testdata/README.md).
std::string TestData(const std::string& name) {
  std::ifstream in(std::string(KVSERVE_CLIENT_TESTDATA_DIR) + "/" + name, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  EXPECT_FALSE(text.str().empty()) << name;
  return text.str();
}

// TLS with testdata's server certificate (for 127.0.0.1); with `client_ca`, every client must
// present a certificate that CA signed.
std::shared_ptr<grpc::ServerCredentials> ServerTls(const std::string& client_ca = "") {
  grpc::SslServerCredentialsOptions options(
      client_ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                        : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_key_cert_pairs.push_back({TestData("server.key"), TestData("server.crt")});
  if (!client_ca.empty()) options.pem_root_certs = TestData(client_ca);
  return grpc::SslServerCredentials(options);
}

// A channel trusting testdata's `ca` (none: plaintext), presenting `client`'s certificate.
ChannelSecurity Security(const std::string& ca = "", const std::string& client = "",
                         const std::string& server_name = "") {
  ChannelSecurity security;
  if (!ca.empty()) security.ca_pem = TestData(ca + ".crt");
  if (!client.empty()) {
    security.cert_pem = TestData(client + ".crt");
    security.key_pem = TestData(client + ".key");
  }
  security.server_name = server_name;
  return security;
}

// The status of a health check of `server` over a fresh channel secured by `security`.
absl::Status Check(const FakeServer& server, const ChannelSecurity& security) {
  return Client::Connect(server.target(), security)
      ->CheckHealth(CallOptions{.timeout = absl::Seconds(30)})
      .status();
}

TEST(ConnectionFailureHintTest, APlaintextClientOnATlsPortIsToldToUseTls) {
  FakeServer server(FakeServer::kDefaultReplicaId, ServerTls());
  ASSERT_TRUE(Check(server, Security("ca")).ok());
  const absl::Status status = Check(server, Security());
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_THAT(status.message(), HasSubstr(" -- most likely the server requires TLS and this "
                                          "client spoke plaintext: give --tls-ca-file"))
      << status;
}

TEST(ConnectionFailureHintTest, AServerCertificateOfAnotherCaIsNamed) {
  FakeServer server(FakeServer::kDefaultReplicaId, ServerTls());
  const absl::Status status = Check(server, Security("other-ca"));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_THAT(status.message(),
              HasSubstr(" -- the server's certificate is not signed by a CA of --tls-ca-file"))
      << status;
}

TEST(ConnectionFailureHintTest, AServerNameTheCertificateDoesNotCarryIsNamed) {
  FakeServer server(FakeServer::kDefaultReplicaId, ServerTls());
  ASSERT_TRUE(Check(server, Security("ca", "", "localhost")).ok());
  const absl::Status status = Check(server, Security("ca", "", "elsewhere.example"));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_THAT(status.message(), HasSubstr(" -- the server's certificate does not name the "
                                          "--target host: give the name it carries as "
                                          "--tls-server-name"))
      << status;
}

TEST(ConnectionFailureHintTest, AMissingClientCertificateIsNamed) {
  FakeServer server(FakeServer::kDefaultReplicaId, ServerTls("ca.crt"));
  ASSERT_TRUE(Check(server, Security("ca", "client")).ok());
  const absl::Status status = Check(server, Security("ca"));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_THAT(status.message(), HasSubstr(" -- most likely the server requires a client "
                                          "certificate (mutual TLS): give --tls-cert-file and "
                                          "--tls-key-file"))
      << status;
}

TEST(ConnectionFailureHintTest, AnUntrustedClientCertificateIsNamed) {
  FakeServer server(FakeServer::kDefaultReplicaId, ServerTls("ca.crt"));
  const absl::Status status = Check(server, Security("ca", "rogue-client"));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_THAT(status.message(), HasSubstr(" -- most likely the server does not trust the client "
                                          "certificate: the CA that signed --tls-cert-file is "
                                          "not among its --tls-client-ca-file"))
      << status;
}

TEST(ConnectionFailureHintTest, ATlsClientOnAPlaintextPortIsToldSo) {
  FakeServer server;
  const absl::Status status = Check(server, Security("ca"));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_THAT(status.message(), HasSubstr(" -- the server does not serve TLS on this port (it "
                                          "answered in plaintext): leave out the --tls-* flags"))
      << status;
}

// kvctl prints the hint on its error line, once.
TEST(ConnectionFailureHintTest, KvctlPrintsTheHintOnce) {
  FakeServer server(FakeServer::kDefaultReplicaId, ServerTls());
  absl::StatusOr<ParsedFlags> flags =
      ParseFlags({"--prompt", "Hi"}, GenerateFlagSpecs(), GenerateRepeatableFlags());
  ASSERT_TRUE(flags.ok()) << flags.status();
  const Globals globals{.target = server.target(), .call = {.timeout = absl::Seconds(30)}};
  std::ostringstream out;
  std::ostringstream err;
  EXPECT_EQ(RunGenerate(globals, *flags, out, err), kExitRpcError);
  EXPECT_THAT(err.str(), ::testing::StartsWith("kvctl: UNAVAILABLE: "));
  EXPECT_THAT(err.str(),
              ::testing::EndsWith(" -- most likely the server requires TLS and this client spoke "
                                  "plaintext: give --tls-ca-file (and --tls-cert-file, "
                                  "--tls-key-file where it requires client certificates)\n"));
}

TEST(ConnectionFailureHintTest, NoHintForOtherErrors) {
  // The server's own errors, whatever their code.
  EXPECT_EQ(ConnectionFailureHint(absl::UnavailableError("kvserve is shutting down"),
                                  ChannelMode::kPlaintext),
            "");
  EXPECT_EQ(
      ConnectionFailureHint(absl::InvalidArgumentError("Socket closed"), ChannelMode::kPlaintext),
      "");
  // A connection that dropped during a call (a server killed, a proxy restarting), not while
  // connecting, says nothing about TLS.
  EXPECT_EQ(ConnectionFailureHint(absl::UnavailableError("Socket closed"), ChannelMode::kPlaintext),
            "");
  EXPECT_EQ(
      ConnectionFailureHint(absl::UnavailableError("Connection reset by peer"), ChannelMode::kTls),
      "");
  const absl::Status closed_while_connecting = absl::UnavailableError(
      "failed to connect to all addresses; last error: UNAVAILABLE: ipv4:127.0.0.1:1: Socket "
      "closed");
  EXPECT_THAT(ConnectionFailureHint(closed_while_connecting, ChannelMode::kPlaintext),
              HasSubstr("requires TLS"));
  // A channel the client was given: how it is secured is not known.
  EXPECT_EQ(ConnectionFailureHint(closed_while_connecting, ChannelMode::kUnknown), "");
  EXPECT_EQ(WithConnectionFailureHint(absl::UnavailableError("x"), ChannelMode::kTls),
            absl::UnavailableError("x"));
  EXPECT_TRUE(WithConnectionFailureHint(absl::OkStatus(), ChannelMode::kTls).ok());

  // Nothing listening: the connection is refused before any TLS.
  std::string target;
  {
    FakeServer gone;
    target = gone.target();
  }
  for (const ChannelSecurity& security : {Security(), Security("ca"), Security("ca", "client")}) {
    const absl::Status status = Client::Connect(target, security)
                                    ->CheckHealth(CallOptions{.timeout = absl::Seconds(30)})
                                    .status();
    EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
    EXPECT_THAT(status.message(), Not(HasSubstr(" -- "))) << status;
  }
}

}  // namespace
}  // namespace kvserve::client
