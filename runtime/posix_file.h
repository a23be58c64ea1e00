// Small POSIX file helpers: whole reads and writes that retry EINTR and short transfers, fsync
// by descriptor or path. What writes files durably goes through runtime/env.h, whose default
// Env is made of these; readers use them directly. Every error is an absl::Status whose message
// starts with the path it is about; a missing file is NOT_FOUND unless the caller asks for another
// code, other failures INTERNAL with the errno text. Thread-compatible: no shared state.
#ifndef ECPS_RUNTIME_POSIX_FILE_H_
#define ECPS_RUNTIME_POSIX_FILE_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ecps {

// "DIR/NAME" (std::filesystem's operator/).
std::string JoinPath(const std::string& dir, const std::string& name);
// `path` without trailing slashes ("/" stays "/").
std::string StripTrailingSlashes(std::string path);

// "PATH: WHAT" with `code`.
absl::Status FileError(absl::StatusCode code, const std::string& path, absl::string_view what);
// "PATH: OP failed: strerror(err)"; NOT_FOUND for ENOENT, INTERNAL otherwise.
absl::Status ErrnoError(const std::string& path, absl::string_view op, int err);

// Closes a file descriptor on scope exit unless released.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser();
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

// Writes all `bytes` at `offset` (pwrite, retrying short writes and EINTR).
absl::Status PwriteAll(int fd, const std::string& path, const void* data, int64_t bytes,
                       int64_t offset);
// Reads exactly `bytes` at `offset`; DATA_LOSS "PATH: truncated: ..." when the file ends first.
absl::Status PreadExact(int fd, const std::string& path, void* data, int64_t bytes, int64_t offset);
// The size of the open file (fstat).
absl::StatusOr<int64_t> FileSize(int fd, const std::string& path);
absl::Status FsyncFd(int fd, const std::string& path);
// fsyncs a file or directory by path (so its contents or its entries are durable).
absl::Status FsyncPath(const std::string& path);
// Opens `path` read-only; a missing file is "PATH: missing" with `missing_code`.
absl::StatusOr<int> OpenForRead(const std::string& path, absl::StatusCode missing_code);

}  // namespace ecps

#endif  // ECPS_RUNTIME_POSIX_FILE_H_
