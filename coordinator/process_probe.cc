#include "coordinator/process_probe.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

namespace ecps {

bool ConnectionRefused(const std::string& address, int timeout_ms) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) return false;
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);  // [::1]:port
  }
  const std::string port = address.substr(colon + 1);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0 || found == nullptr) {
    return false;
  }
  bool refused = false;
  const int fd = socket(found->ai_family, found->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                        found->ai_protocol);
  if (fd >= 0) {
    if (connect(fd, found->ai_addr, found->ai_addrlen) != 0) {
      if (errno == ECONNREFUSED) {
        refused = true;
      } else if (errno == EINPROGRESS) {
        pollfd p{fd, POLLOUT, 0};
        if (poll(&p, 1, timeout_ms) == 1) {
          int error = 0;
          socklen_t len = sizeof(error);
          refused = getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) == 0 &&
                    error == ECONNREFUSED;
        }
      }
    }
    close(fd);
  }
  freeaddrinfo(found);
  return refused;
}

}  // namespace ecps
