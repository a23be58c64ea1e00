// Non-blocking socket I/O by a deadline (ps/deadline_io.h).
#include "ps/deadline_io.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>

namespace ecps {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

// Waits until `fd` is ready for `events` or `deadline` passes.
Io WaitFd(int fd, short events, Clock::time_point deadline) {
  while (true) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return Io::kTimeout;
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1 << 30)));
    if (n > 0) return Io::kOk;  // readable, writable, or an error the next call reports
    if (n == 0) return Io::kTimeout;
    if (errno != EINTR) return Io::kError;
  }
}

// Reads exactly `n` bytes from the non-blocking `fd` by `deadline`. kClosed: the peer closed
// the connection (before or within the bytes).
Io ReadFull(int fd, void* out, size_t n, Clock::time_point deadline) {
  char* p = static_cast<char*>(out);
  while (n > 0) {
    const ssize_t got = ::recv(fd, p, n, 0);
    if (got > 0) {
      p += got;
      n -= static_cast<size_t>(got);
      continue;
    }
    if (got == 0) return Io::kClosed;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return Io::kError;
    if (Io w = WaitFd(fd, POLLIN, deadline); w != Io::kOk) return w;
  }
  return Io::kOk;
}

// Writes every byte of `iov` to the non-blocking `fd` by `deadline`.
Io WriteFull(int fd, iovec* iov, int count, Clock::time_point deadline) {
  while (count > 0 && iov->iov_len == 0) {
    ++iov;
    --count;
  }
  while (count > 0) {
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(count);
    const ssize_t put = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (put < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return Io::kError;
      if (Io w = WaitFd(fd, POLLOUT, deadline); w != Io::kOk) return w;
      continue;
    }
    size_t left = static_cast<size_t>(put);
    while (count > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      ++iov;
      --count;
    }
    if (count > 0) {
      iov->iov_base = static_cast<char*>(iov->iov_base) + left;
      iov->iov_len -= left;
    }
  }
  return Io::kOk;
}

void SetNoDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

}  // namespace ecps
