// Tests of MetricsHttpServer: binding, GET /metrics through a plain socket, 404/405, address
// parsing, and that destruction stops serving.
#include "server/metrics_http_server.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>

namespace kvserve::server {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// A socket connected to 127.0.0.1:port, or -1 when the connection is refused.
int Connect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Sends `request` as it is and returns everything the server answers until it closes.
std::string Exchange(int port, const std::string& request) {
  const int fd = Connect(port);
  if (fd < 0) return "<connection refused>";
  size_t sent = 0;
  while (sent < request.size()) {
    const ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  std::string response;
  char buffer[4096];
  ssize_t n;
  while ((n = ::recv(fd, buffer, sizeof(buffer), 0)) > 0) {
    response.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return response;
}

std::string Get(int port, const std::string& path) {
  return Exchange(port, "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
}

constexpr char kBody[] = "# TYPE up gauge\nup 1\n";

std::unique_ptr<MetricsHttpServer> StartOrDie(std::function<std::string()> render) {
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> server =
      MetricsHttpServer::Start("127.0.0.1:0", std::move(render));
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

TEST(MetricsHttpServerTest, PortZeroPicksAFreePort) {
  std::unique_ptr<MetricsHttpServer> server = StartOrDie([] { return std::string(kBody); });
  ASSERT_NE(server, nullptr);
  EXPECT_GT(server->port(), 0);
  EXPECT_LE(server->port(), 65535);
}

TEST(MetricsHttpServerTest, GetMetricsReturnsTheRenderedBody) {
  std::atomic<int> renders{0};
  std::unique_ptr<MetricsHttpServer> server = StartOrDie([&renders] {
    ++renders;
    return std::string(kBody);
  });
  ASSERT_NE(server, nullptr);
  const std::string response = Get(server->port(), "/metrics");
  EXPECT_THAT(response, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(response, HasSubstr("\r\nContent-Length: 21\r\n"));
  EXPECT_THAT(response,
              HasSubstr("\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"));
  EXPECT_THAT(response, EndsWith(std::string("\r\n\r\n") + kBody));
  EXPECT_EQ(renders.load(), 1);
  // A query string still reaches /metrics; every scrape renders afresh.
  EXPECT_THAT(Get(server->port(), "/metrics?format=text"), StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_EQ(renders.load(), 2);
}

TEST(MetricsHttpServerTest, OtherPathIsNotFound) {
  std::atomic<int> renders{0};
  std::unique_ptr<MetricsHttpServer> server = StartOrDie([&renders] {
    ++renders;
    return std::string(kBody);
  });
  ASSERT_NE(server, nullptr);
  EXPECT_THAT(Get(server->port(), "/other"), StartsWith("HTTP/1.1 404 Not Found\r\n"));
  EXPECT_THAT(Get(server->port(), "/metricsx"), StartsWith("HTTP/1.1 404 Not Found\r\n"));
  EXPECT_EQ(renders.load(), 0);
}

TEST(MetricsHttpServerTest, PostIsMethodNotAllowed) {
  std::unique_ptr<MetricsHttpServer> server = StartOrDie([] { return std::string(kBody); });
  ASSERT_NE(server, nullptr);
  const std::string response =
      Exchange(server->port(), "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
  EXPECT_THAT(response, StartsWith("HTTP/1.1 405 Method Not Allowed\r\n"));
  EXPECT_THAT(response, Not(HasSubstr("up 1")));
}

TEST(MetricsHttpServerTest, MalformedAddressIsInvalidArgument) {
  for (const char* address : {"nonsense", "127.0.0.1:99999", "127.0.0.1:-1", "127.0.0.1:http"}) {
    absl::StatusOr<std::unique_ptr<MetricsHttpServer>> server =
        MetricsHttpServer::Start(address, [] { return std::string(); });
    EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument) << address;
    EXPECT_THAT(std::string(server.status().message()), HasSubstr(address));
  }
}

TEST(MetricsHttpServerTest, PortInUseIsUnavailable) {
  std::unique_ptr<MetricsHttpServer> first = StartOrDie([] { return std::string(kBody); });
  ASSERT_NE(first, nullptr);
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> second = MetricsHttpServer::Start(
      "127.0.0.1:" + std::to_string(first->port()), [] { return std::string(); });
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
}

TEST(MetricsHttpServerTest, DestructionStopsServing) {
  for (int i = 0; i < 5; ++i) {
    std::unique_ptr<MetricsHttpServer> server =
        StartOrDie([i] { return "round " + std::to_string(i) + "\n"; });
    ASSERT_NE(server, nullptr);
    const int port = server->port();
    EXPECT_THAT(Get(port, "/metrics"), EndsWith("round " + std::to_string(i) + "\n"));
    server.reset();  // joins the serving thread and closes the socket
    const int fd = Connect(port);
    EXPECT_EQ(fd, -1) << "port " << port << " still accepts connections";
    if (fd >= 0) ::close(fd);
  }
}

}  // namespace
}  // namespace kvserve::server
