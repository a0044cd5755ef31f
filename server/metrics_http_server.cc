// MetricsHttpServer: accept loop, request parsing just enough for GET /metrics.
#include "server/metrics_http_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace kvserve::server {
namespace {

// Writes all of `data`; false when the peer went away.
bool WriteAll(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

std::string Response(const std::string& status, const std::string& content_type,
                     const std::string& body) {
  return absl::StrCat("HTTP/1.1 ", status, "\r\nContent-Type: ", content_type,
                      "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n", body);
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& address, std::function<std::string()> render) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics-listen '", address, "' is not HOST:PORT"));
  }
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* resolved = nullptr;
  const std::string port_text = std::to_string(port);
  if (::getaddrinfo(host.empty() ? nullptr : host.c_str(), port_text.c_str(), &hints, &resolved) !=
          0 ||
      resolved == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics-listen '", address, "': cannot resolve the host"));
  }
  int fd = -1;
  for (addrinfo* ai = resolved; ai != nullptr && fd < 0; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd, 16) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(resolved);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("--metrics-listen ", address, ": cannot bind (", std::strerror(errno), ")"));
  }
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length);
  const int bound_port = bound.ss_family == AF_INET6
                             ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                             : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return std::unique_ptr<MetricsHttpServer>(
      new MetricsHttpServer(fd, bound_port, std::move(render)));
}

MetricsHttpServer::MetricsHttpServer(int listen_fd, int port, std::function<std::string()> render)
    : listen_fd_(listen_fd), port_(port), render_(std::move(render)) {
  thread_ = std::thread([this] { Serve(); });
}

MetricsHttpServer::~MetricsHttpServer() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  ::close(listen_fd_);
}

void MetricsHttpServer::Serve() {
  while (!stop_) {
    pollfd p{listen_fd_, POLLIN, 0};
    // Wake up regularly to notice stop_.
    if (::poll(&p, 1, 100) <= 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    Handle(fd);
    ::close(fd);
  }
}

void MetricsHttpServer::Handle(int fd) {
  // Read the request head (bounded in size and time: a scrape sends a few hundred bytes).
  std::string request;
  char buffer[2048];
  while (request.find("\r\n\r\n") == std::string::npos && request.size() < 16384) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 2000) <= 0) return;
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) return;
    request.append(buffer, static_cast<size_t>(n));
  }
  const size_t line_end = request.find("\r\n");
  const std::string line = request.substr(0, line_end);
  const bool is_get = line.rfind("GET ", 0) == 0;
  const size_t path_end = line.find(' ', 4);
  const std::string path = is_get ? line.substr(4, path_end - 4) : "";
  if (!is_get) {
    WriteAll(fd, Response("405 Method Not Allowed", "text/plain", "only GET is served\n"));
  } else if (path == "/metrics" || path.rfind("/metrics?", 0) == 0) {
    WriteAll(fd, Response("200 OK", "text/plain; version=0.0.4; charset=utf-8", render_()));
  } else {
    WriteAll(fd, Response("404 Not Found", "text/plain", "see /metrics\n"));
  }
}

}  // namespace kvserve::server
