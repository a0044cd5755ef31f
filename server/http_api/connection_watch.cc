// ConnectionWatch: a request's socket found among the process's descriptors, polled for a close.
#include "server/http_api/connection_watch.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstdlib>

namespace kvserve::server::http_api {
namespace {

// The numeric address and port of `address`; false for other families.
bool AddressOf(const sockaddr_storage& address, std::string* host, int* port) {
  char text[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&address);
    ::inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
    *port = ntohs(in->sin_port);
  } else if (address.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&address);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text));
    *port = ntohs(in6->sin6_port);
  } else {
    return false;
  }
  *host = text;
  return true;
}

}  // namespace

ConnectionWatch::ConnectionWatch(const std::string& remote_addr, int remote_port, int local_port,
                                 int tls_fd) {
  if (tls_fd >= 0) {
    fd_ = tls_fd;
    return;
  }
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return;
  while (const dirent* entry = ::readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0') continue;
    sockaddr_storage local{};
    sockaddr_storage peer{};
    socklen_t local_size = sizeof(local);
    socklen_t peer_size = sizeof(peer);
    if (::getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &local_size) !=
            0 ||
        ::getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &peer_size) != 0) {
      continue;
    }
    std::string local_host, peer_host;
    int local_p = -1, peer_p = -1;
    if (!AddressOf(local, &local_host, &local_p) || !AddressOf(peer, &peer_host, &peer_p)) continue;
    if (local_p == local_port && peer_p == remote_port && peer_host == remote_addr) {
      fd_ = static_cast<int>(fd);
      break;
    }
  }
  ::closedir(dir);
}

bool ConnectionWatch::PeerClosed() const {
  if (fd_ < 0) return false;
  pollfd p{.fd = fd_, .events = POLLIN | POLLRDHUP, .revents = 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
  if (p.revents & POLLIN) {
    char byte = 0;
    // Readable with nothing to read: the peer's FIN.
    return ::recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
  }
  return false;
}

}  // namespace kvserve::server::http_api
