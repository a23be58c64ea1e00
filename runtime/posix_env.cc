// Env::Default(): the Env over plain POSIX calls (runtime/posix_file.h's helpers).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/env.h"
#include "runtime/posix_file.h"
#include "runtime/status_macros.h"

namespace ecps {
namespace {

namespace fs = std::filesystem;

class PosixWritableFile : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd, int64_t end)
      : path_(std::move(path)), fd_(fd), end_(end) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }

  absl::Status Append(absl::string_view data) override {
    const int64_t bytes = static_cast<int64_t>(data.size());
    RETURN_IF_ERROR(PwriteAll(fd_, path_, data.data(), bytes, end_));
    end_ += bytes;
    return absl::OkStatus();
  }
  absl::Status Truncate(int64_t size) override {
    if (::ftruncate(fd_, size) != 0) return ErrnoError(path_, "truncate", errno);
    end_ = size;
    return absl::OkStatus();
  }
  absl::Status Allocate(int64_t size) override {
    if (int err = ::posix_fallocate(fd_, 0, size); err != 0) {
      return ErrnoError(path_, "fallocate", err);
    }
    return absl::OkStatus();
  }
  absl::Status Sync() override { return FsyncFd(fd_, path_); }
  absl::Status Close() override {
    if (::close(std::exchange(fd_, -1)) != 0) return ErrnoError(path_, "close", errno);
    return absl::OkStatus();
  }
  const std::string& path() const override { return path_; }

 private:
  const std::string path_;
  int fd_;
  int64_t end_;  // where the next Append goes
};

class PosixMappedFile : public MappedFile {
 public:
  PosixMappedFile(std::string path, int fd, char* map, int64_t size)
      : path_(std::move(path)), fd_(fd), map_(map), size_(size) {}
  ~PosixMappedFile() override {
    if (map_ != nullptr) ::munmap(map_, static_cast<size_t>(size_));
    if (fd_ >= 0) ::close(fd_);
  }

  char* data() override { return map_; }
  int64_t size() const override { return size_; }
  absl::Status Sync() override {
    if (::msync(map_, static_cast<size_t>(size_), MS_SYNC) != 0) {
      return ErrnoError(path_, "msync", errno);
    }
    if (::fdatasync(fd_) != 0) return ErrnoError(path_, "fdatasync", errno);
    return absl::OkStatus();
  }
  absl::Status Close() override {
    ::munmap(std::exchange(map_, nullptr), static_cast<size_t>(size_));
    if (::close(std::exchange(fd_, -1)) != 0) return ErrnoError(path_, "close", errno);
    return absl::OkStatus();
  }
  const std::string& path() const override { return path_; }

 private:
  const std::string path_;
  int fd_;
  char* map_;
  const int64_t size_;
};

absl::Status FsError(const std::string& path, absl::string_view op, const std::error_code& ec) {
  return ErrnoError(path, op, ec.value());
}

class PosixEnv : public Env {
 public:
  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return ErrnoError(path, "create", errno);
    return std::make_unique<PosixWritableFile>(path, fd, 0);
  }

  absl::StatusOr<std::unique_ptr<WritableFile>> NewAppendableFile(
      const std::string& path) override {
    int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoError(path, "open", errno);
    FdCloser closer(fd);
    ASSIGN_OR_RETURN(int64_t size, FileSize(fd, path));
    return std::make_unique<PosixWritableFile>(path, closer.release(), size);
  }

  absl::StatusOr<std::unique_ptr<MappedFile>> NewMappedFile(const std::string& path,
                                                            int64_t size) override {
    int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) return ErrnoError(path, "open", errno);
    FdCloser closer(fd);
    ASSIGN_OR_RETURN(int64_t actual, FileSize(fd, path));
    if (size < 1 || actual != size) {
      return FileError(absl::StatusCode::kFailedPrecondition, path,
                       absl::StrCat("size is ", actual, " bytes, expected ", size, " to map"));
    }
    void* map =
        ::mmap(nullptr, static_cast<size_t>(size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) return ErrnoError(path, "mmap", errno);
    return std::make_unique<PosixMappedFile>(path, closer.release(), static_cast<char*>(map), size);
  }

  absl::Status SyncPath(const std::string& path) override { return FsyncPath(path); }

  absl::Status RenameFile(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) return ErrnoError(to, "rename", errno);
    return absl::OkStatus();
  }

  absl::Status RemoveFile(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) return ErrnoError(path, "unlink", errno);
    return absl::OkStatus();
  }

  absl::Status RemoveAll(const std::string& path) override {
    std::error_code ec;
    fs::remove_all(path, ec);
    if (ec) return FsError(path, "remove", ec);
    return absl::OkStatus();
  }

  absl::Status CreateDir(const std::string& path) override {
    if (::mkdir(path.c_str(), 0755) != 0) return ErrnoError(path, "mkdir", errno);
    return absl::OkStatus();
  }

  absl::StatusOr<bool> CreateDirs(const std::string& path) override {
    std::error_code ec;
    const bool created = fs::create_directories(path, ec);
    if (ec) return FsError(path, "mkdir", ec);
    return created;
  }

  absl::StatusOr<std::string> ReadFile(const std::string& path) override {
    ASSIGN_OR_RETURN(int fd, OpenForRead(path, absl::StatusCode::kNotFound));
    FdCloser closer(fd);
    ASSIGN_OR_RETURN(int64_t size, FileSize(fd, path));
    std::string data(static_cast<size_t>(size), '\0');
    RETURN_IF_ERROR(PreadExact(fd, path, data.data(), size, 0));
    return data;
  }

  absl::StatusOr<int64_t> GetFileSize(const std::string& path) override {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return ErrnoError(path, "stat", errno);
    return static_cast<int64_t>(st.st_size);
  }

  absl::StatusOr<FileKind> GetFileKind(const std::string& path) override {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      if (errno == ENOENT || errno == ENOTDIR) return FileKind::kMissing;
      return ErrnoError(path, "stat", errno);
    }
    if (S_ISREG(st.st_mode)) return FileKind::kFile;
    if (S_ISDIR(st.st_mode)) return FileKind::kDirectory;
    return FileKind::kOther;
  }

  absl::StatusOr<std::vector<DirEntry>> ListDir(const std::string& dir) override {
    std::vector<DirEntry> out;
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      // An entry whose target cannot be read (a dangling symbolic link) is listed all the same.
      std::error_code status_ec;
      const fs::file_status st = it->status(status_ec);
      FileKind kind = FileKind::kOther;
      if (st.type() == fs::file_type::not_found) kind = FileKind::kMissing;
      if (st.type() == fs::file_type::regular) kind = FileKind::kFile;
      if (st.type() == fs::file_type::directory) kind = FileKind::kDirectory;
      out.push_back(DirEntry{it->path().filename().string(), kind});
    }
    if (ec) return FsError(dir, "list", ec);
    return out;
  }
};

}  // namespace

Env* Env::Default() {
  static Env* const env = new PosixEnv();  // stateless; never destroyed
  return env;
}

absl::Status WriteFileDurably(const std::string& path, absl::string_view contents, Env* env) {
  const std::string tmp = path + ".tmp";
  {
    ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, env->NewWritableFile(tmp));
    RETURN_IF_ERROR(file->Append(contents));
    RETURN_IF_ERROR(file->Sync());
    RETURN_IF_ERROR(file->Close());
  }
  RETURN_IF_ERROR(env->RenameFile(tmp, path));
  const std::string dir = fs::path(path).parent_path().string();
  return env->SyncPath(dir.empty() ? "." : dir);  // a bare name lives in the working directory
}

}  // namespace ecps
