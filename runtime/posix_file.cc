#include "runtime/posix_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace ecps {

namespace fs = std::filesystem;

std::string JoinPath(const std::string& dir, const std::string& name) {
  return (fs::path(dir) / name).string();
}

std::string StripTrailingSlashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

absl::Status FileError(absl::StatusCode code, const std::string& path, absl::string_view what) {
  return absl::Status(code, absl::StrCat(path, ": ", what));
}

absl::Status ErrnoError(const std::string& path, absl::string_view op, int err) {
  absl::StatusCode code = err == ENOENT ? absl::StatusCode::kNotFound : absl::StatusCode::kInternal;
  return FileError(code, path, absl::StrCat(op, " failed: ", std::strerror(err)));
}

FdCloser::~FdCloser() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status PwriteAll(int fd, const std::string& path, const void* data, int64_t bytes,
                       int64_t offset) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::pwrite(fd, p, static_cast<size_t>(bytes), offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(path, "write", errno);
    }
    if (n == 0) return FileError(absl::StatusCode::kInternal, path, "write made no progress");
    p += n;
    bytes -= n;
    offset += n;
  }
  return absl::OkStatus();
}

absl::Status PreadExact(int fd, const std::string& path, void* data, int64_t bytes,
                        int64_t offset) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    ssize_t n = ::pread(fd, p, static_cast<size_t>(bytes), offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(path, "read", errno);
    }
    if (n == 0) {
      return FileError(absl::StatusCode::kDataLoss, path,
                       absl::StrCat("truncated: ends before byte ", offset + bytes));
    }
    p += n;
    bytes -= n;
    offset += n;
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> FileSize(int fd, const std::string& path) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return ErrnoError(path, "stat", errno);
  return static_cast<int64_t>(st.st_size);
}

absl::Status FsyncFd(int fd, const std::string& path) {
  if (::fsync(fd) != 0) return ErrnoError(path, "fsync", errno);
  return absl::OkStatus();
}

absl::Status FsyncPath(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError(path, "open", errno);
  FdCloser closer(fd);
  return FsyncFd(fd, path);
}

absl::StatusOr<int> OpenForRead(const std::string& path, absl::StatusCode missing_code) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return FileError(missing_code, path, "missing");
    return ErrnoError(path, "open", errno);
  }
  return fd;
}

}  // namespace ecps
