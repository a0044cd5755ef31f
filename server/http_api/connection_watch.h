// ConnectionWatch: whether the client of an HTTP request has gone away, asked while the request
// waits for the engine (cpp-httplib 0.11 tells a handler nothing of its connection), so that a
// client that disconnects cancels its request.
#pragma once

#include <string>

namespace kvserve::server::http_api {

// One request's connection, found by its addresses (or its TLS session). Used by the thread
// that serves the request, while the request lasts (the connection's socket stays open until
// then, so its descriptor cannot be reused meanwhile).
class ConnectionWatch {
 public:
  // The socket with local port `local_port` and peer `remote_addr`:`remote_port`, or, with
  // `tls_fd` >= 0, that descriptor. Finds none (and never reports a close) when the socket
  // cannot be found.
  ConnectionWatch(const std::string& remote_addr, int remote_port, int local_port, int tls_fd);

  // Whether the peer closed its side or the connection failed. Never blocks.
  bool PeerClosed() const;
  bool found() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace kvserve::server::http_api
