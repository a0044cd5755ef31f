// MetricsHttpServer: address parsing, binding, and a one-thread poll() loop that serves many
// connections at once, each under a deadline, parsing requests just enough for GET /metrics.
#include "server/metrics_http_server.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "base/clock.h"
#include "base/string_cat.h"

namespace kvserve::server {
namespace {

// How long one poll() waits at most: bounds how late the loop notices stop, a passed
// deadline, and (with an injected clock) a clock that was moved.
constexpr int kPollTickMs = 100;
constexpr int kListenBacklog = 64;
constexpr std::string_view kHeadEnd = "\r\n\r\n";

std::string Response(std::string_view status, std::string_view content_type,
                     std::string_view body) {
  return base::Cat("HTTP/1.1 ", status, "\r\nContent-Type: ", content_type,
                   "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n", body);
}

std::string PlainResponse(std::string_view status, std::string_view body) {
  return Response(status, "text/plain", body);
}

// `line` cut at each space (two spaces make an empty part).
std::vector<std::string_view> SplitOnSpaces(std::string_view line) {
  std::vector<std::string_view> parts;
  for (size_t start = 0;;) {
    const size_t space = line.find(' ', start);
    parts.push_back(line.substr(start, space - start));
    if (space == std::string_view::npos) return parts;
    start = space + 1;
  }
}

// The answer to a complete request head (without its final blank line). Only the request
// line matters: "METHOD SP TARGET SP HTTP/x.y".
std::string AnswerFor(std::string_view head, const std::function<std::string()>& render) {
  const std::string_view line = head.substr(0, head.find("\r\n"));
  const std::vector<std::string_view> parts = SplitOnSpaces(line);
  if (parts.size() != 3 || parts[0].empty() || !parts[1].starts_with('/') ||
      !parts[2].starts_with("HTTP/")) {
    return PlainResponse("400 Bad Request", "malformed request line\n");
  }
  if (parts[0] != "GET") {
    return PlainResponse("405 Method Not Allowed", "only GET is served\n");
  }
  const std::string_view path = parts[1].substr(0, parts[1].find('?'));
  if (path != "/metrics") return PlainResponse("404 Not Found", "see /metrics\n");
  return Response("200 OK", "text/plain; version=0.0.4; charset=utf-8", render());
}

// One accepted connection: reads a request head, writes one answer, then waits for the
// client to close. Owns its non-blocking socket. Used by the serving thread only.
class Connection {
 public:
  Connection(int fd, absl::Time deadline, size_t max_head_bytes)
      : fd_(fd), deadline_(deadline), max_head_bytes_(max_head_bytes) {}
  ~Connection() { ::close(fd_); }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  int fd() const { return fd_; }
  absl::Time deadline() const { return deadline_; }
  bool done() const { return state_ == State::kDone; }
  bool writing() const { return state_ == State::kWriting; }
  // The poll() events this connection waits for.
  short events() const { return writing() ? POLLOUT : POLLIN; }

  // Makes progress after poll() reported `revents`; at most one recv or send.
  void OnReady(short revents, const std::function<std::string()>& render) {
    if ((revents & (POLLERR | POLLNVAL)) != 0) {
      state_ = State::kDone;
    } else if (writing()) {
      Write();
    } else {
      Read(render);
    }
  }

 private:
  enum class State {
    kReading,   // collecting the request head
    kWriting,   // sending the answer
    kDraining,  // answer sent and our side shut; discarding input until the client closes
    kDone,      // to be closed
  };

  void Read(const std::function<std::string()>& render) {
    char buffer[4096];
    const ssize_t n = ::recv(fd_, buffer, sizeof(buffer), 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {
      state_ = State::kDone;  // closed or failed; an incomplete request gets no answer
      return;
    }
    if (state_ == State::kDraining) return;
    const size_t search_from = request_.size() < 3 ? 0 : request_.size() - 3;
    request_.append(buffer, static_cast<size_t>(n));
    const size_t head_end = request_.find(kHeadEnd, search_from);
    if (head_end != std::string::npos && head_end + kHeadEnd.size() <= max_head_bytes_) {
      StartWriting(AnswerFor(std::string_view(request_).substr(0, head_end), render));
    } else if (request_.size() > max_head_bytes_) {
      StartWriting(
          PlainResponse("431 Request Header Fields Too Large",
                        base::Cat("the request head exceeds ", max_head_bytes_, " bytes\n")));
    }
  }

  void StartWriting(std::string response) {
    request_.clear();
    response_ = std::move(response);
    state_ = State::kWriting;
    Write();
  }

  void Write() {
    const ssize_t n = ::send(fd_, response_.data() + sent_, response_.size() - sent_, MSG_NOSIGNAL);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n < 0) {
      state_ = State::kDone;
      return;
    }
    sent_ += static_cast<size_t>(n);
    if (sent_ < response_.size()) return;
    // Closing while the client still sends (a body, an oversized head) would reset the
    // connection and could discard the answer before the client reads it; so shut our side
    // and let the client close first.
    ::shutdown(fd_, SHUT_WR);
    response_.clear();
    state_ = State::kDraining;
  }

  const int fd_;
  const absl::Time deadline_;
  const size_t max_head_bytes_;
  State state_ = State::kReading;
  std::string request_;
  std::string response_;
  size_t sent_ = 0;
};

// The connections of one listening socket, in accept order, and one step of serving them.
class ConnectionLoop {
 public:
  ConnectionLoop(int listen_fd, const MetricsHttpServerOptions& options,
                 const std::function<std::string()>& render)
      : listen_fd_(listen_fd),
        options_(options),
        clock_(options.clock != nullptr ? options.clock : base::RealClock::Get()),
        render_(render) {}

  // Waits up to kPollTickMs for activity, serves it, accepts new connections and closes the
  // finished and expired ones.
  void RunOnce() {
    std::vector<pollfd> fds;
    fds.reserve(connections_.size() + 1);
    fds.push_back({listen_fd_, POLLIN, 0});
    for (const std::unique_ptr<Connection>& connection : connections_) {
      fds.push_back({connection->fd(), connection->events(), 0});
    }
    if (::poll(fds.data(), fds.size(), kPollTickMs) > 0) {
      // Serve before accepting: accepting may evict, which would shift the indices.
      for (size_t i = 0; i < connections_.size(); ++i) {
        if (fds[i + 1].revents != 0) connections_[i]->OnReady(fds[i + 1].revents, render_);
      }
      if ((fds[0].revents & POLLIN) != 0) AcceptPending();
    }
    CloseFinishedAndExpired();
  }

 private:
  // Accepts what the listening socket holds (at most max_connections per step, so a flood
  // of connects cannot starve the connections already open).
  void AcceptPending() {
    for (int i = 0; i < options_.max_connections; ++i) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        return;  // EAGAIN: none left; other errors are retried on the next step
      }
      if (static_cast<int>(connections_.size()) >= options_.max_connections && !EvictOldestIdle()) {
        ::close(fd);
        continue;
      }
      connections_.push_back(std::make_unique<Connection>(
          fd, clock_->Now() + options_.connection_timeout, options_.max_request_head_bytes));
    }
  }

  // Closes the oldest connection that is not writing an answer; false when all are writing.
  bool EvictOldestIdle() {
    const auto oldest = std::find_if(
        connections_.begin(), connections_.end(),
        [](const std::unique_ptr<Connection>& connection) { return !connection->writing(); });
    if (oldest == connections_.end()) return false;
    connections_.erase(oldest);
    return true;
  }

  void CloseFinishedAndExpired() {
    const absl::Time now = clock_->Now();
    std::erase_if(connections_, [now](const std::unique_ptr<Connection>& connection) {
      return connection->done() || now >= connection->deadline();
    });
  }

  const int listen_fd_;
  const MetricsHttpServerOptions& options_;
  const base::Clock* const clock_;
  const std::function<std::string()>& render_;
  std::vector<std::unique_ptr<Connection>> connections_;
};

absl::Status ValidateOptions(const MetricsHttpServerOptions& options) {
  if (options.connection_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("metrics connection_timeout must be positive");
  }
  if (options.max_request_head_bytes < kHeadEnd.size()) {
    return absl::InvalidArgumentError("metrics max_request_head_bytes is too small");
  }
  if (options.max_connections < 1) {
    return absl::InvalidArgumentError("metrics max_connections must be at least 1");
  }
  return absl::OkStatus();
}

// A listening, non-blocking socket bound to the first of the `resolved` addresses that can
// be bound; -1 with errno set when none can.
int BindAndListen(const addrinfo* resolved) {
  int last_errno = EADDRNOTAVAIL;
  for (const addrinfo* ai = resolved; ai != nullptr; ai = ai->ai_next) {
    const int fd =
        ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) {
      last_errno = errno;
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, kListenBacklog) == 0) {
      return fd;
    }
    last_errno = errno;
    ::close(fd);
  }
  errno = last_errno;
  return -1;
}

}  // namespace

absl::StatusOr<MetricsListenAddress> ParseMetricsListenAddress(std::string_view address) {
  const auto invalid = [address](std::string_view why) {
    return absl::InvalidArgumentError(base::Cat("--metrics-listen '", address, "': ", why));
  };
  std::string_view host;
  std::string_view port_text;
  if (address.starts_with('[')) {
    const size_t bracket = address.find(']');
    if (bracket == std::string_view::npos || bracket == 1 ||
        address.substr(bracket + 1, 1) != ":") {
      return invalid("expected [IPV6]:PORT");
    }
    host = address.substr(1, bracket - 1);
    port_text = address.substr(bracket + 2);
  } else {
    const size_t colon = address.rfind(':');
    if (colon == std::string_view::npos) return invalid("expected HOST:PORT or :PORT");
    host = address.substr(0, colon);
    if (host.find(':') != std::string_view::npos)
      return invalid("an IPv6 host needs brackets: [::1]:PORT");
    port_text = address.substr(colon + 1);
  }
  int port = 0;
  if (port_text.empty() || port_text.size() > 5 ||
      !std::all_of(port_text.begin(), port_text.end(), absl::ascii_isdigit)) {
    return invalid("the port must be a number in [0, 65535]");
  }
  for (const char digit : port_text) port = port * 10 + (digit - '0');
  if (port > 65535) return invalid("the port must be a number in [0, 65535]");
  return MetricsListenAddress{host.empty() ? "127.0.0.1" : std::string(host), port};
}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& address, std::function<std::string()> render,
    const MetricsHttpServerOptions& options) {
  absl::StatusOr<MetricsListenAddress> parsed = ParseMetricsListenAddress(address);
  if (!parsed.ok()) return parsed.status();
  if (absl::Status valid = ValidateOptions(options); !valid.ok()) return valid;

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* resolved = nullptr;
  const std::string port_text = std::to_string(parsed->port);
  if (::getaddrinfo(parsed->host.c_str(), port_text.c_str(), &hints, &resolved) != 0 ||
      resolved == nullptr) {
    return absl::InvalidArgumentError(
        base::Cat("--metrics-listen '", address, "': cannot resolve the host"));
  }
  const int fd = BindAndListen(resolved);
  const int bind_errno = errno;
  ::freeaddrinfo(resolved);
  if (fd < 0) {
    return absl::UnavailableError(base::Cat("--metrics-listen '", address, "': cannot bind (",
                                            std::strerror(bind_errno), ")"));
  }

  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  char host[NI_MAXHOST] = "";
  char service[NI_MAXSERV] = "";
  int bound_port = 0;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length) != 0 ||
      ::getnameinfo(reinterpret_cast<sockaddr*>(&bound), length, host, sizeof(host), service,
                    sizeof(service), NI_NUMERICHOST | NI_NUMERICSERV) != 0 ||
      !absl::SimpleAtoi(service, &bound_port)) {
    ::close(fd);
    return absl::UnavailableError(
        base::Cat("--metrics-listen '", address, "': cannot read the bound address"));
  }
  return std::unique_ptr<MetricsHttpServer>(
      new MetricsHttpServer(fd, bound_port, host, std::move(render), options));
}

MetricsHttpServer::MetricsHttpServer(int listen_fd, int port, std::string host,
                                     std::function<std::string()> render,
                                     const MetricsHttpServerOptions& options)
    : listen_fd_(listen_fd),
      port_(port),
      host_(std::move(host)),
      render_(std::move(render)),
      options_(options) {
  thread_ = std::thread([this] { Serve(); });
}

MetricsHttpServer::~MetricsHttpServer() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  ::close(listen_fd_);
}

void MetricsHttpServer::Serve() {
  ConnectionLoop loop(listen_fd_, options_, render_);
  while (!stop_) loop.RunOnce();
}

}  // namespace kvserve::server
