// MetricsHttpServer: a minimal HTTP/1.1 endpoint that serves GET /metrics in Prometheus text
// format. (prometheus-cpp's civetweb exposer cannot start threads next to LibTorch: civetweb
// asks for a thread stack smaller than LibTorch's static TLS, so pthread_create fails.)
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace kvserve::server {

class MetricsHttpServer {
 public:
  // Binds `address` ("HOST:PORT"; port 0 picks a free one) and serves on its own thread;
  // `render` produces the body of each /metrics response and must be thread-safe.
  // InvalidArgument for a malformed address, Unavailable when it cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const std::string& address, std::function<std::string()> render);
  // Stops accepting and joins the thread.
  ~MetricsHttpServer();

  int port() const { return port_; }

 private:
  MetricsHttpServer(int listen_fd, int port, std::function<std::string()> render);
  void Serve();
  // Reads one request from `fd`, writes the response and closes it.
  void Handle(int fd);

  const int listen_fd_;
  const int port_;
  const std::function<std::string()> render_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace kvserve::server
