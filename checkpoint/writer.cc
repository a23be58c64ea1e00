#include "checkpoint/writer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "checkpoint/manifest.h"
#include "runtime/env.h"
#include "runtime/hash.h"
#include "runtime/posix_file.h"
#include "runtime/status_macros.h"

namespace ecps {

namespace fs = std::filesystem;

absl::StatusOr<std::string> BeginCheckpoint(const std::string& root,
                                            const CheckpointLayout& layout) {
  RETURN_IF_ERROR(ValidateLayout(layout));
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) return FileError(absl::StatusCode::kInternal, root, "mkdir failed: " + ec.message());
  const std::string final_dir = JoinPath(root, CheckpointDirName(layout.step));
  if (fs::exists(final_dir, ec)) {
    return FileError(absl::StatusCode::kAlreadyExists, final_dir, "already committed");
  }
  const std::string tmp_dir = final_dir + ".tmp";
  fs::remove_all(tmp_dir, ec);  // a leftover of an earlier, unfinished attempt
  if (ec) return FileError(absl::StatusCode::kInternal, tmp_dir, "remove failed: " + ec.message());
  if (::mkdir(tmp_dir.c_str(), 0755) != 0) return ErrnoError(tmp_dir, "mkdir", errno);
  for (size_t t = 0; t < layout.table_rows.size(); ++t) {
    int i = static_cast<int>(t);
    std::string path = JoinPath(tmp_dir, TableFileName(i));
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return ErrnoError(path, "create", errno);
    FdCloser closer(fd);
    // Blocks are allocated now, so that a full disk is an error here and not a SIGBUS in a
    // server writing rows through its mapping of the file.
    if (int err = ::posix_fallocate(fd, 0, TableFileBytes(layout, i)); err != 0) {
      return ErrnoError(path, "fallocate", err);
    }
  }
  return tmp_dir;
}

absl::Status CommitCheckpoint(const std::string& tmp_dir_arg, const CheckpointLayout& layout,
                              const std::vector<uint64_t>& table_checksums,
                              const std::vector<DenseEntry>& dense,
                              const std::vector<int64_t>& reader_positions,
                              std::string* final_dir) {
  RETURN_IF_ERROR(ValidateLayout(layout));
  const std::string tmp_dir = StripTrailingSlashes(tmp_dir_arg);
  const fs::path tmp_path(tmp_dir);
  const std::string expected_name = CheckpointDirName(layout.step) + ".tmp";
  if (tmp_path.filename() != expected_name) {
    return absl::InvalidArgumentError(
        absl::StrCat(tmp_dir, ": not the directory BeginCheckpoint made for step ", layout.step,
                     " (expected a directory named ", expected_name, ")"));
  }
  if (table_checksums.size() != layout.table_rows.size()) {
    return absl::InvalidArgumentError(absl::StrCat(table_checksums.size(), " table checksums for ",
                                                   layout.table_rows.size(), " tables"));
  }
  if (dense.size() != layout.dense_sizes.size()) {
    return absl::InvalidArgumentError(absl::StrCat(dense.size(), " dense entries for ",
                                                   layout.dense_sizes.size(), " dense tensors"));
  }
  for (size_t d = 0; d < dense.size(); ++d) {
    if (dense[d].version < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("dense tensor ", d, " has version ", dense[d].version));
    }
  }
  for (size_t w = 0; w < reader_positions.size(); ++w) {
    if (reader_positions[w] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("reader position of worker ", w, " is ", reader_positions[w]));
    }
  }

  // Every file must be there with its exact size; make its data durable.
  auto check_file = [](const std::string& path, int64_t bytes) -> absl::Status {
    ASSIGN_OR_RETURN(int fd, OpenForRead(path, absl::StatusCode::kFailedPrecondition));
    FdCloser closer(fd);
    ASSIGN_OR_RETURN(int64_t size, FileSize(fd, path));
    if (size != bytes) {
      return FileError(absl::StatusCode::kFailedPrecondition, path,
                       absl::StrCat("size is ", size, " bytes, expected ", bytes));
    }
    return FsyncFd(fd, path);
  };
  for (size_t t = 0; t < layout.table_rows.size(); ++t) {
    int i = static_cast<int>(t);
    RETURN_IF_ERROR(check_file(JoinPath(tmp_dir, TableFileName(i)), TableFileBytes(layout, i)));
  }
  for (size_t d = 0; d < layout.dense_sizes.size(); ++d) {
    int i = static_cast<int>(d);
    RETURN_IF_ERROR(check_file(JoinPath(tmp_dir, DenseFileName(i)), DenseFileBytes(layout, i)));
  }

  const fs::path root = tmp_path.parent_path().empty() ? fs::path(".") : tmp_path.parent_path();
  const std::string final_path = (root / CheckpointDirName(layout.step)).string();
  std::error_code ec;
  if (fs::exists(final_path, ec)) {
    return FileError(absl::StatusCode::kAlreadyExists, final_path, "already committed");
  }

  Manifest m;
  m.format_version = kCheckpointFormatVersion;
  m.created = absl::FormatTime(absl::RFC3339_sec, absl::Now(), absl::UTCTimeZone());
  m.layout = layout;
  m.table_checksums = table_checksums;
  m.dense = dense;
  m.reader_positions = reader_positions;
  // WriteFileDurably fsyncs tmp_dir, which also makes the data files' entries durable.
  RETURN_IF_ERROR(WriteFileDurably(JoinPath(tmp_dir, kManifestName), ManifestToJson(m)));
  if (::rename(tmp_dir.c_str(), final_path.c_str()) != 0) {
    return ErrnoError(final_path, "rename", errno);
  }
  RETURN_IF_ERROR(FsyncPath(root.string()));
  if (final_dir != nullptr) *final_dir = final_path;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<TableWriter>> TableWriter::Open(const std::string& tmp_dir,
                                                               int table, int64_t rows,
                                                               int payload_floats) {
  if (table < 0 || rows < 1 || payload_floats < 1 ||
      rows > std::numeric_limits<int64_t>::max() / 8 / payload_floats) {
    return absl::InvalidArgumentError(absl::StrCat("TableWriter: table ", table, ", rows ", rows,
                                                   ", payload_floats ", payload_floats));
  }
  std::string path = JoinPath(tmp_dir, TableFileName(table));
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) {
      return FileError(absl::StatusCode::kFailedPrecondition, path,
                       "missing (BeginCheckpoint creates it)");
    }
    return ErrnoError(path, "open", errno);
  }
  FdCloser closer(fd);
  ASSIGN_OR_RETURN(int64_t size, FileSize(fd, path));
  const int64_t expected = rows * payload_floats * 4;
  if (size != expected) {
    return FileError(absl::StatusCode::kFailedPrecondition, path,
                     absl::StrCat("size is ", size, " bytes, expected ", expected, " (", rows,
                                  " rows of ", payload_floats, " floats)"));
  }
  // Rows go through a shared mapping: a server's rows are interleaved with the other servers'
  // in the file, and one pwrite per row would cost a system call per row.
  void* map =
      ::mmap(nullptr, static_cast<size_t>(expected), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) return ErrnoError(path, "mmap", errno);
  return std::unique_ptr<TableWriter>(new TableWriter(
      std::move(path), closer.release(), static_cast<char*>(map), rows, payload_floats));
}

TableWriter::~TableWriter() {
  if (map_ != nullptr) ::munmap(map_, MapBytes());
  if (fd_ >= 0) ::close(fd_);
}

absl::Status TableWriter::WriteRows(const int64_t* rows, const float* payloads, int64_t n) {
  if (fd_ < 0) return FileError(absl::StatusCode::kFailedPrecondition, path_, "already finished");
  if (n < 0 || (n > 0 && (rows == nullptr || payloads == nullptr))) {
    return absl::InvalidArgumentError(absl::StrCat("WriteRows: n is ", n));
  }
  for (int64_t i = 0; i < n; ++i) {
    if (rows[i] < 0 || rows[i] >= rows_) {
      return FileError(absl::StatusCode::kInvalidArgument, path_,
                       absl::StrCat("row ", rows[i], " out of range [0, ", rows_, ")"));
    }
  }
  const int64_t row_bytes = int64_t{payload_floats_} * 4;
  int64_t i = 0;
  while (i < n) {
    int64_t j = i + 1;
    while (j < n && rows[j] == rows[j - 1] + 1) ++j;
    const float* src = payloads + i * payload_floats_;
    std::memcpy(map_ + rows[i] * row_bytes, src, static_cast<size_t>((j - i) * row_bytes));
    for (int64_t k = i; k < j; ++k) {
      checksum_ ^= RowChecksum(rows[k], payloads + k * payload_floats_, payload_floats_);
    }
    rows_written_ += j - i;
    i = j;
  }
  return absl::OkStatus();
}

absl::Status TableWriter::Finish() {
  if (fd_ < 0) return FileError(absl::StatusCode::kFailedPrecondition, path_, "already finished");
  int fd = std::exchange(fd_, -1);
  FdCloser closer(fd);
  const size_t bytes = MapBytes();
  char* map = std::exchange(map_, nullptr);
  const bool synced = ::msync(map, bytes, MS_SYNC) == 0;
  const int sync_errno = errno;
  ::munmap(map, bytes);
  if (!synced) return ErrnoError(path_, "msync", sync_errno);
  if (::fdatasync(fd) != 0) return ErrnoError(path_, "fdatasync", errno);
  if (::close(closer.release()) != 0) return ErrnoError(path_, "close", errno);
  return absl::OkStatus();
}

absl::StatusOr<DenseEntry> WriteDense(const std::string& tmp_dir, int tensor, int64_t version,
                                      const std::vector<float>& weights,
                                      const std::vector<float>& state) {
  if (tensor < 0 || weights.empty() || version < 0) {
    return absl::InvalidArgumentError(absl::StrCat("WriteDense: tensor ", tensor, ", size ",
                                                   weights.size(), ", version ", version));
  }
  DenseHeader header{};
  std::memcpy(header.magic, kDenseMagic, sizeof(kDenseMagic));
  header.format_version = kCheckpointFormatVersion;
  header.tensor = static_cast<uint32_t>(tensor);
  header.size = static_cast<int64_t>(weights.size());
  header.state_floats = static_cast<int64_t>(state.size());
  header.version = version;
  header.reserved = 0;

  std::string path = JoinPath(tmp_dir, DenseFileName(tensor));
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    if (errno == ENOENT) {
      return FileError(absl::StatusCode::kFailedPrecondition, tmp_dir,
                       "missing (BeginCheckpoint creates it)");
    }
    return ErrnoError(path, "create", errno);
  }
  FdCloser closer(fd);
  const int64_t weight_bytes = header.size * 4;
  const int64_t state_bytes = header.state_floats * 4;
  Hash64Stream hash(0);
  hash.Update(&header, sizeof(header));
  hash.Update(weights.data(), static_cast<size_t>(weight_bytes));
  hash.Update(state.data(), static_cast<size_t>(state_bytes));
  RETURN_IF_ERROR(PwriteAll(fd, path, &header, sizeof(header), 0));
  RETURN_IF_ERROR(PwriteAll(fd, path, weights.data(), weight_bytes, kDenseHeaderBytes));
  RETURN_IF_ERROR(PwriteAll(fd, path, state.data(), state_bytes, kDenseHeaderBytes + weight_bytes));
  if (::fdatasync(fd) != 0) return ErrnoError(path, "fdatasync", errno);
  if (::close(closer.release()) != 0) return ErrnoError(path, "close", errno);
  return DenseEntry{version, hash.Digest()};
}

}  // namespace ecps
