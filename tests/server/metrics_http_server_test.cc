// Tests of MetricsHttpServer: address parsing and binding, GET /metrics through plain sockets,
// 400/404/405/431, serving scrapes while slow and idle clients hold connections, deadlines
// (on an injected clock), the connection cap, and that destruction stops serving.
#include "server/metrics_http_server.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/clock.h"

namespace kvserve::server {
namespace {

using ::testing::AnyOf;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// Every test socket gives up on a read or write after this long, so a server that does not
// answer shows up as a failed read rather than a hung test. Far longer than any answer takes.
constexpr int kSocketTimeoutSeconds = 10;

// A socket connected to 127.0.0.1:port, or -1 when the connection is refused.
int Connect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  const timeval timeout{kSocketTimeoutSeconds, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
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

// Owns a connected test socket.
class Socket {
 public:
  explicit Socket(int port) : fd_(Connect(port)) {}
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  Socket(Socket&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Socket& operator=(Socket&&) = delete;

  bool connected() const { return fd_ >= 0; }

  bool Send(const std::string& data) {
    size_t sent = 0;
    while (sent < data.size()) {
      const ssize_t n = ::send(fd_, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += static_cast<size_t>(n);
    }
    return true;
  }

  // Everything the server sends until it closes; a read that fails or times out ends the
  // text with a marker, so no expectation on a whole answer can pass.
  std::string ReadToEnd() {
    std::string response;
    char buffer[4096];
    for (;;) {
      const ssize_t n = ::recv(fd_, buffer, sizeof(buffer), 0);
      if (n == 0) return response;
      if (n < 0) return response + "<recv failed: " + std::strerror(errno) + ">";
      response.append(buffer, static_cast<size_t>(n));
    }
  }

  // True when the server has closed its end: the next read (waiting up to the socket
  // timeout) sees end-of-stream or a reset, with no answer bytes before it.
  bool WaitForClose() {
    char byte;
    const ssize_t n = ::recv(fd_, &byte, 1, 0);
    return n == 0 || (n < 0 && errno == ECONNRESET);
  }

  // True when the server keeps the connection open and has sent nothing: a read now would
  // block.
  bool IsOpenAndSilent() {
    char byte;
    const ssize_t n = ::recv(fd_, &byte, 1, MSG_DONTWAIT | MSG_PEEK);
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }

 private:
  int fd_;
};

// Sends `request` as it is and returns everything the server answers until it closes.
std::string Exchange(int port, const std::string& request) {
  Socket socket(port);
  if (!socket.connected()) return "<connection refused>";
  if (!socket.Send(request)) return "<send failed>";
  return socket.ReadToEnd();
}

std::string Get(int port, const std::string& path) {
  return Exchange(port, "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
}

constexpr char kBody[] = "# TYPE up gauge\nup 1\n";

std::string RenderBody() { return kBody; }

std::unique_ptr<MetricsHttpServer> StartOrDie(std::function<std::string()> render,
                                              const MetricsHttpServerOptions& options = {},
                                              const std::string& address = "127.0.0.1:0") {
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> server =
      MetricsHttpServer::Start(address, std::move(render), options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

// A whole, successful scrape of kBody.
void ExpectScrape(int port) {
  const std::string response = Get(port, "/metrics");
  EXPECT_THAT(response, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(response, EndsWith(std::string("\r\n\r\n") + kBody));
}

TEST(MetricsHttpServerTest, PortZeroPicksAFreePort) {
  std::unique_ptr<MetricsHttpServer> server = StartOrDie(RenderBody);
  ASSERT_NE(server, nullptr);
  EXPECT_GT(server->port(), 0);
  EXPECT_LE(server->port(), 65535);
  EXPECT_EQ(server->host(), "127.0.0.1");
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
  std::unique_ptr<MetricsHttpServer> server = StartOrDie(RenderBody);
  ASSERT_NE(server, nullptr);
  // The body is never read as a request; the answer still arrives whole.
  const std::string response =
      Exchange(server->port(), "POST /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello");
  EXPECT_THAT(response, StartsWith("HTTP/1.1 405 Method Not Allowed\r\n"));
  EXPECT_THAT(response, EndsWith("\r\n\r\nonly GET is served\n"));
  EXPECT_THAT(response, Not(HasSubstr("up 1")));
}

TEST(MetricsHttpServerTest, MalformedRequestLineIsBadRequest) {
  std::unique_ptr<MetricsHttpServer> server = StartOrDie(RenderBody);
  ASSERT_NE(server, nullptr);
  for (const char* request :
       {"GARBAGE\r\n\r\n", "GET /metrics\r\n\r\n", "GET metrics HTTP/1.1\r\n\r\n",
        "GET /metrics HTTP/1.1 extra\r\n\r\n", "GET /metrics SPDY/3\r\n\r\n", "\r\n\r\n"}) {
    EXPECT_THAT(Exchange(server->port(), request), StartsWith("HTTP/1.1 400 Bad Request\r\n"))
        << request;
  }
}

TEST(MetricsHttpServerTest, RequestHeadOverTheLimitIsRefused) {
  MetricsHttpServerOptions options;
  options.max_request_head_bytes = 8192;
  std::unique_ptr<MetricsHttpServer> server = StartOrDie(RenderBody, options);
  ASSERT_NE(server, nullptr);
  // A head of `head_bytes` bytes, the final blank line included.
  const auto request = [](size_t head_bytes) {
    const std::string start = "GET /metrics HTTP/1.1\r\nX-Pad: ";
    const std::string end = "\r\n\r\n";
    return start + std::string(head_bytes - start.size() - end.size(), 'a') + end;
  };
  ASSERT_EQ(request(8192).size(), 8192u);
  EXPECT_THAT(Exchange(server->port(), request(8192)), StartsWith("HTTP/1.1 200 OK\r\n"));
  const std::string refused = Exchange(server->port(), request(8193));
  EXPECT_THAT(refused, StartsWith("HTTP/1.1 431 Request Header Fields Too Large\r\n"));
  EXPECT_THAT(refused, Not(HasSubstr("up 1")));
  // A head that never ends is refused once it passes the limit, not read forever.
  Socket endless(server->port());
  ASSERT_TRUE(endless.Send("GET /metrics HTTP/1.1\r\nX-Pad: " + std::string(20000, 'a')));
  EXPECT_THAT(endless.ReadToEnd(), StartsWith("HTTP/1.1 431 Request Header Fields Too Large\r\n"));
}

// The adversarial run: one client sending a byte at a time and 20 idle connections blocked
// every scrape of the old one-connection-at-a-time server.
TEST(MetricsHttpServerTest, SlowAndIdleClientsDoNotBlockScrapes) {
  MetricsHttpServerOptions options;
  options.connection_timeout = absl::Minutes(10);  // they stay open for the whole test
  std::unique_ptr<MetricsHttpServer> server = StartOrDie(RenderBody, options);
  ASSERT_NE(server, nullptr);
  std::vector<Socket> idle;
  for (int i = 0; i < 20; ++i) {
    idle.emplace_back(server->port());
    ASSERT_TRUE(idle.back().connected());
  }
  Socket slow(server->port());
  ASSERT_TRUE(slow.connected());
  const std::string slow_request = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";

  for (int scrape = 0; scrape < 5; ++scrape) {
    SCOPED_TRACE(scrape);
    ASSERT_TRUE(slow.Send(slow_request.substr(scrape, 1)));
    ExpectScrape(server->port());
  }

  // Every scrape was served while the others were still connected and waiting.
  for (Socket& socket : idle) EXPECT_TRUE(socket.IsOpenAndSilent());
  EXPECT_TRUE(slow.IsOpenAndSilent());
  // ... and the slow client is served too once its request is whole.
  ASSERT_TRUE(slow.Send(slow_request.substr(5)));
  const std::string response = slow.ReadToEnd();
  EXPECT_THAT(response, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(response, EndsWith(std::string("\r\n\r\n") + kBody));
}

TEST(MetricsHttpServerTest, IdleConnectionIsClosedAtItsDeadline) {
  base::FakeClock clock;
  MetricsHttpServerOptions options;
  options.connection_timeout = absl::Seconds(5);
  options.clock = &clock;
  std::unique_ptr<MetricsHttpServer> server = StartOrDie(RenderBody, options);
  ASSERT_NE(server, nullptr);
  Socket idle(server->port());
  ASSERT_TRUE(idle.connected());
  // Connections are accepted in order, so once this scrape is answered `idle` has been
  // accepted, with its deadline 5 s from the clock's start.
  ExpectScrape(server->port());

  clock.Advance(absl::Seconds(5) - absl::Milliseconds(1));
  // The server has looked at the moved clock by the time it answers a new connection.
  ExpectScrape(server->port());
  EXPECT_TRUE(idle.IsOpenAndSilent());

  clock.Advance(absl::Milliseconds(1));
  EXPECT_TRUE(idle.WaitForClose());
}

// The deadline covers the whole request, so a client that keeps sending a byte now and then
// is still cut off.
TEST(MetricsHttpServerTest, TricklingClientIsClosedAtItsDeadline) {
  base::FakeClock clock;
  MetricsHttpServerOptions options;
  options.connection_timeout = absl::Seconds(5);
  options.clock = &clock;
  std::unique_ptr<MetricsHttpServer> server = StartOrDie(RenderBody, options);
  ASSERT_NE(server, nullptr);
  Socket slow(server->port());
  ASSERT_TRUE(slow.connected());
  ExpectScrape(server->port());  // `slow` is accepted now
  for (const char byte : std::string("GET /")) {
    ASSERT_TRUE(slow.Send(std::string(1, byte)));
    ExpectScrape(server->port());
    EXPECT_TRUE(slow.IsOpenAndSilent());
    clock.Advance(absl::Seconds(1));
  }
  EXPECT_TRUE(slow.WaitForClose());
}

TEST(MetricsHttpServerTest, DeadlineUsesTheRealClockByDefault) {
  MetricsHttpServerOptions options;
  options.connection_timeout = absl::Milliseconds(50);
  std::unique_ptr<MetricsHttpServer> server = StartOrDie(RenderBody, options);
  ASSERT_NE(server, nullptr);
  Socket idle(server->port());
  ASSERT_TRUE(idle.connected());
  ASSERT_TRUE(idle.Send("GET /met"));
  EXPECT_TRUE(idle.WaitForClose());
}

TEST(MetricsHttpServerTest, ConnectionOverTheCapClosesTheOldestIdle) {
  MetricsHttpServerOptions options;
  options.max_connections = 2;
  options.connection_timeout = absl::Minutes(10);
  std::unique_ptr<MetricsHttpServer> server = StartOrDie(RenderBody, options);
  ASSERT_NE(server, nullptr);
  Socket oldest(server->port());
  Socket newer(server->port());
  ASSERT_TRUE(oldest.connected());
  ASSERT_TRUE(newer.connected());
  // The scrape is the third connection: the oldest idle one makes room for it.
  ExpectScrape(server->port());
  EXPECT_TRUE(oldest.WaitForClose());
  EXPECT_TRUE(newer.IsOpenAndSilent());
}

TEST(MetricsHttpServerTest, InvalidOptionsAreInvalidArgument) {
  MetricsHttpServerOptions no_connections;
  no_connections.max_connections = 0;
  MetricsHttpServerOptions no_time;
  no_time.connection_timeout = absl::ZeroDuration();
  for (const MetricsHttpServerOptions& options : {no_connections, no_time}) {
    EXPECT_EQ(MetricsHttpServer::Start("127.0.0.1:0", RenderBody, options).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

TEST(MetricsHttpServerTest, ParsesListenAddresses) {
  struct Case {
    const char* address;
    const char* host;
    int port;
  };
  for (const Case& c : {Case{":9090", "127.0.0.1", 9090}, Case{":0", "127.0.0.1", 0},
                        Case{"0.0.0.0:80", "0.0.0.0", 80}, Case{"[::]:65535", "::", 65535},
                        Case{"[::1]:1", "::1", 1}, Case{"localhost:8080", "localhost", 8080}}) {
    absl::StatusOr<MetricsListenAddress> parsed = ParseMetricsListenAddress(c.address);
    ASSERT_TRUE(parsed.ok()) << c.address << ": " << parsed.status();
    EXPECT_EQ(parsed->host, c.host) << c.address;
    EXPECT_EQ(parsed->port, c.port) << c.address;
  }
}

TEST(MetricsHttpServerTest, MalformedAddressIsInvalidArgument) {
  for (const char* address :
       {"nonsense", "127.0.0.1:99999", "127.0.0.1:65536", "127.0.0.1:-1", "127.0.0.1:+80",
        "127.0.0.1:http", "127.0.0.1:", ":", "", "::1:9090", "[::1]9090", "[]:80", "[::1:80"}) {
    absl::StatusOr<std::unique_ptr<MetricsHttpServer>> server =
        MetricsHttpServer::Start(address, [] { return std::string(); });
    EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument) << address;
    EXPECT_THAT(std::string(server.status().message()), HasSubstr("--metrics-listen"));
    EXPECT_THAT(std::string(server.status().message()), HasSubstr(address));
  }
}

TEST(MetricsHttpServerTest, AddressWithoutHostBindsLoopbackOnly) {
  std::unique_ptr<MetricsHttpServer> server = StartOrDie(RenderBody, {}, ":0");
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(server->host(), "127.0.0.1");
  ExpectScrape(server->port());
}

TEST(MetricsHttpServerTest, ExplicitWildcardAndLocalhostBind) {
  std::unique_ptr<MetricsHttpServer> any = StartOrDie(RenderBody, {}, "0.0.0.0:0");
  ASSERT_NE(any, nullptr);
  EXPECT_EQ(any->host(), "0.0.0.0");
  ExpectScrape(any->port());

  std::unique_ptr<MetricsHttpServer> local = StartOrDie(RenderBody, {}, "localhost:0");
  ASSERT_NE(local, nullptr);
  EXPECT_THAT(local->host(), AnyOf("127.0.0.1", "::1"));
}

TEST(MetricsHttpServerTest, PortInUseIsUnavailable) {
  std::unique_ptr<MetricsHttpServer> first = StartOrDie(RenderBody);
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
    Socket open_connection(port);  // closed by the destructor, not left behind
    ASSERT_TRUE(open_connection.connected());
    server.reset();  // joins the serving thread and closes the sockets
    EXPECT_TRUE(open_connection.WaitForClose());
    const int fd = Connect(port);
    EXPECT_EQ(fd, -1) << "port " << port << " still accepts connections";
    if (fd >= 0) ::close(fd);
  }
}

}  // namespace
}  // namespace kvserve::server
