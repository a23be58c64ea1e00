// Env: the file system as the code that owns its durability sees it (the checkpoint writer and
// store, the coordinator's state log), as leveldb's Env. Production uses Env::Default(), plain
// POSIX calls; a test wraps it (runtime/fault_injection_env.h) to fail an fsync, tear a write
// or stop the writer between a write and a rename, deterministically.
//
// Errors are absl::Status values whose message starts with the path they are about: NOT_FOUND
// "PATH: missing" (or "PATH: OP failed: ...") for a missing file, INTERNAL "PATH: OP failed:
// strerror" for other system errors. An Env is thread-safe; a file object is not (one thread
// at a time).
#ifndef ECPS_RUNTIME_ENV_H_
#define ECPS_RUNTIME_ENV_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ecps {

// A file open for writing. Bytes go at its end; nothing is durable before Sync returns OK.
// The destructor closes it (ignoring errors) when Close was not called.
class WritableFile {
 public:
  virtual ~WritableFile() = default;

  // Writes all of `data` at the end of the file. An error may leave any prefix of it written.
  virtual absl::Status Append(absl::string_view data) = 0;
  // Cuts the file to `size` bytes; later appends go there.
  virtual absl::Status Truncate(int64_t size) = 0;
  // Allocates the disk blocks of the first `size` bytes (the file reads as zeros up to there),
  // so that a full disk is an error now and not later; appends still go at the old end.
  virtual absl::Status Allocate(int64_t size) = 0;
  // Makes the written bytes durable (fsync).
  virtual absl::Status Sync() = 0;
  virtual absl::Status Close() = 0;
  virtual const std::string& path() const = 0;
};

// A shared, writable mapping of a whole existing file: bytes stored through data() reach the
// file with no system call each. The destructor unmaps and closes it when Close was not called.
class MappedFile {
 public:
  virtual ~MappedFile() = default;

  virtual char* data() = 0;
  virtual int64_t size() const = 0;
  // Makes the stored bytes durable (msync, fdatasync).
  virtual absl::Status Sync() = 0;
  // Unmaps and closes; data() is invalid afterwards.
  virtual absl::Status Close() = 0;
  virtual const std::string& path() const = 0;
};

enum class FileKind { kMissing, kFile, kDirectory, kOther };

struct DirEntry {
  std::string name;  // the entry's name, not its path
  FileKind kind = FileKind::kOther;
};

class Env {
 public:
  virtual ~Env() = default;

  // The POSIX environment. It holds no state; the pointer is valid for the program's life.
  static Env* Default();

  // Creates `path`, or truncates it when it exists, for writing.
  virtual absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path) = 0;
  // Opens the existing `path` for writing at its end; NOT_FOUND when it is missing.
  virtual absl::StatusOr<std::unique_ptr<WritableFile>> NewAppendableFile(
      const std::string& path) = 0;
  // Maps the existing `path`, which must be `size` > 0 bytes long (FAILED_PRECONDITION naming
  // it otherwise), shared and writable.
  virtual absl::StatusOr<std::unique_ptr<MappedFile>> NewMappedFile(const std::string& path,
                                                                    int64_t size) = 0;

  // fsyncs a file or a directory by path: its contents, or its entries, become durable.
  virtual absl::Status SyncPath(const std::string& path) = 0;
  // rename(2): atomically replaces `to` (a file, or an empty directory) with `from`.
  virtual absl::Status RenameFile(const std::string& from, const std::string& to) = 0;
  // Removes a file (not a directory).
  virtual absl::Status RemoveFile(const std::string& path) = 0;
  // Removes a file or a whole directory tree; OK when `path` is missing.
  virtual absl::Status RemoveAll(const std::string& path) = 0;
  // Creates one directory; an error when it exists.
  virtual absl::Status CreateDir(const std::string& path) = 0;
  // Creates `path` and its missing parents; true when it created `path` itself.
  virtual absl::StatusOr<bool> CreateDirs(const std::string& path) = 0;

  // The whole contents of `path`.
  virtual absl::StatusOr<std::string> ReadFile(const std::string& path) = 0;
  virtual absl::StatusOr<int64_t> GetFileSize(const std::string& path) = 0;
  // What `path` is (symbolic links followed); kMissing when nothing is there.
  virtual absl::StatusOr<FileKind> GetFileKind(const std::string& path) = 0;
  // The entries of directory `dir`, in no order ("." and ".." left out).
  virtual absl::StatusOr<std::vector<DirEntry>> ListDir(const std::string& dir) = 0;
};

// Replaces PATH with `contents` durably and atomically: PATH.tmp, fsync, rename, fsync of the
// directory. A crash leaves either the old PATH or the new one (and perhaps PATH.tmp); an error
// may leave either.
absl::Status WriteFileDurably(const std::string& path, absl::string_view contents,
                              Env* env = Env::Default());

}  // namespace ecps

#endif  // ECPS_RUNTIME_ENV_H_
