// MetricsHttpServer: a minimal HTTP/1.1 endpoint that serves GET /metrics in Prometheus text
// format. (prometheus-cpp's civetweb exposer cannot start threads next to LibTorch: civetweb
// asks for a thread stack smaller than LibTorch's static TLS, so pthread_create fails.)
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace kvserve::base {
class Clock;
}  // namespace kvserve::base

namespace kvserve::server {

// Limits that keep one slow, idle or hostile client from blocking a scrape. A Prometheus
// scrape sends a request head of a few hundred bytes and reads the answer at once.
struct MetricsHttpServerOptions {
  // Each connection gets this long from accept to its last byte (reading the request, writing
  // the answer, waiting for the client to close); then it is closed. Default 5 s.
  absl::Duration connection_timeout = absl::Seconds(5);
  // A request head (request line and headers) longer than this is answered 431. Default 8 KiB.
  size_t max_request_head_bytes = 8 * 1024;
  // Connections open at once. A new one beyond this closes the oldest connection that is not
  // writing an answer, or is closed itself when all are writing. Default 64.
  int max_connections = 64;
  // Time for the deadlines; null: the real clock. Must outlive the server.
  const base::Clock* clock = nullptr;
};

// The HOST and PORT of a --metrics-listen address.
struct MetricsListenAddress {
  std::string host;  // without brackets: "127.0.0.1", "::", "localhost"
  int port = 0;      // 0: the kernel picks a free one
};

// Parses "HOST:PORT", "[IPV6]:PORT" or ":PORT". No host means loopback (127.0.0.1), so
// exposing metrics on every interface takes an explicit "0.0.0.0:PORT" or "[::]:PORT".
// InvalidArgument naming --metrics-listen and `address` when it is malformed or the port is
// outside [0, 65535].
absl::StatusOr<MetricsListenAddress> ParseMetricsListenAddress(std::string_view address);

// Serves connections from one thread with a poll() loop, so many clients are served at once;
// each answer is "Connection: close". 200 for GET /metrics (a query string is allowed), 404
// for other paths, 405 for other methods, 400 for a malformed request line, 431 for a request
// head over the limit.
class MetricsHttpServer {
 public:
  // Binds `address` (see ParseMetricsListenAddress) and serves on its own thread; `render`
  // produces the body of each /metrics response and must be thread-safe. InvalidArgument for
  // a malformed address or options, Unavailable when it cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const std::string& address, std::function<std::string()> render,
      const MetricsHttpServerOptions& options = {});
  // Stops accepting, closes every connection and joins the thread.
  ~MetricsHttpServer();

  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // The bound port, and the bound host as a numeric address ("127.0.0.1", "::").
  int port() const { return port_; }
  const std::string& host() const { return host_; }

 private:
  MetricsHttpServer(int listen_fd, int port, std::string host, std::function<std::string()> render,
                    const MetricsHttpServerOptions& options);
  void Serve();

  const int listen_fd_;
  const int port_;
  const std::string host_;
  const std::function<std::string()> render_;
  const MetricsHttpServerOptions options_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace kvserve::server
