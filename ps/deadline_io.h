// Non-blocking socket I/O by a deadline: the reads, writes and waits of parity batches over
// TCP (ps/tcp_deltas.h), on both ends. A call never blocks past its deadline, whatever the
// far end does.
#ifndef ECPS_PS_DEADLINE_IO_H_
#define ECPS_PS_DEADLINE_IO_H_

#include <sys/uio.h>

#include <chrono>
#include <cstddef>

namespace ecps {

// How an I/O call ended: done, the peer closed the connection, the deadline passed, or a
// socket error.
enum class Io { kOk, kClosed, kTimeout, kError };

// Waits until `fd` is ready for `events` (poll's) or `deadline` passes.
Io WaitFd(int fd, short events, std::chrono::steady_clock::time_point deadline);

// Reads exactly `n` bytes from the non-blocking `fd` by `deadline`. kClosed: the peer closed
// the connection (before or within the bytes).
Io ReadFull(int fd, void* out, size_t n, std::chrono::steady_clock::time_point deadline);

// Writes every byte of the `count` buffers of `iov` to the non-blocking `fd` by `deadline`.
// Advances `iov` past what it wrote.
Io WriteFull(int fd, iovec* iov, int count, std::chrono::steady_clock::time_point deadline);

// Turns Nagle's algorithm off on the TCP socket `fd`.
void SetNoDelay(int fd);

}  // namespace ecps

#endif  // ECPS_PS_DEADLINE_IO_H_
