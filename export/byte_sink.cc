#include "export/byte_sink.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "runtime/posix_file.h"

namespace ecps {
namespace {

class FileSink : public ByteSink {
 public:
  FileSink(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~FileSink() override {
    if (fd_ >= 0) ::close(fd_);
  }

  absl::Status Append(absl::string_view bytes) override {
    if (fd_ < 0) return FileError(absl::StatusCode::kInternal, path_, "write after close");
    absl::Status s =
        PwriteAll(fd_, path_, bytes.data(), static_cast<int64_t>(bytes.size()), offset_);
    offset_ += static_cast<int64_t>(bytes.size());
    return s;
  }

  absl::Status Close() override {
    if (fd_ < 0) return absl::OkStatus();
    absl::Status s = FsyncFd(fd_, path_);
    if (::close(fd_) != 0 && s.ok()) s = ErrnoError(path_, "close", errno);
    fd_ = -1;
    return s;
  }

 private:
  const std::string path_;
  int fd_;
  int64_t offset_ = 0;
};

class StringSink : public ByteSink {
 public:
  StringSink(std::string* out, int64_t fail_after) : out_(out), fail_after_(fail_after) {}

  absl::Status Append(absl::string_view bytes) override {
    if (fail_after_ >= 0 && static_cast<int64_t>(out_->size() + bytes.size()) > fail_after_) {
      return absl::InternalError("memory sink: write failed");
    }
    out_->append(bytes.data(), bytes.size());
    return absl::OkStatus();
  }
  absl::Status Close() override { return absl::OkStatus(); }

 private:
  std::string* out_;
  const int64_t fail_after_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ByteSink>> CreateFileSink(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    if (errno == EEXIST) {
      return FileError(absl::StatusCode::kAlreadyExists, path, "already exists");
    }
    return ErrnoError(path, "create", errno);
  }
  return std::unique_ptr<ByteSink>(new FileSink(path, fd));
}

std::unique_ptr<ByteSink> MemorySink(std::string* out, int64_t fail_after) {
  return std::make_unique<StringSink>(out, fail_after);
}

}  // namespace ecps
