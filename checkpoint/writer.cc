#include "checkpoint/writer.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "checkpoint/manifest.h"
#include "runtime/hash.h"
#include "runtime/posix_file.h"
#include "runtime/status_macros.h"

namespace ecps {

namespace fs = std::filesystem;

namespace {

// Every data file of the checkpoint begun in `tmp_dir` must be there with its exact size;
// makes its data durable (the servers that wrote it have fsynced it too, in their processes).
absl::Status SyncDataFiles(const std::string& tmp_dir, const CheckpointLayout& layout, Env* env) {
  auto check_file = [env](const std::string& path, int64_t bytes) -> absl::Status {
    absl::StatusOr<int64_t> size = env->GetFileSize(path);
    if (absl::IsNotFound(size.status())) {
      return FileError(absl::StatusCode::kFailedPrecondition, path, "missing");
    }
    RETURN_IF_ERROR(size.status());
    if (*size != bytes) {
      return FileError(absl::StatusCode::kFailedPrecondition, path,
                       absl::StrCat("size is ", *size, " bytes, expected ", bytes));
    }
    return env->SyncPath(path);
  };
  for (size_t t = 0; t < layout.table_rows.size(); ++t) {
    int i = static_cast<int>(t);
    RETURN_IF_ERROR(check_file(JoinPath(tmp_dir, TableFileName(i)), TableFileBytes(layout, i)));
  }
  for (size_t d = 0; d < layout.dense_sizes.size(); ++d) {
    int i = static_cast<int>(d);
    RETURN_IF_ERROR(check_file(JoinPath(tmp_dir, DenseFileName(i)), DenseFileBytes(layout, i)));
  }
  return absl::OkStatus();
}

// Renames `tmp_dir` to `final_path`, which publishes the checkpoint, and fsyncs `root`. When
// that fsync fails the save has failed, so the checkpoint is unpublished again (renamed back):
// an error never leaves a checkpoint behind that the caller would not know of.
absl::Status Publish(const std::string& tmp_dir, const std::string& final_path,
                     const std::string& root, Env* env) {
  RETURN_IF_ERROR(env->RenameFile(tmp_dir, final_path));
  absl::Status synced = env->SyncPath(root);
  if (synced.ok()) return synced;
  absl::Status back = env->RenameFile(final_path, tmp_dir);
  if (back.ok()) return synced;
  return absl::Status(synced.code(),
                      absl::StrCat(synced.message(), "; ", final_path,
                                   " stays published (it is complete): ", back.message()));
}

}  // namespace

absl::StatusOr<std::string> BeginCheckpoint(const std::string& root, const CheckpointLayout& layout,
                                            Env* env) {
  RETURN_IF_ERROR(ValidateLayout(layout));
  RETURN_IF_ERROR(env->CreateDirs(root).status());
  const std::string final_dir = JoinPath(root, CheckpointDirName(layout.step));
  ASSIGN_OR_RETURN(FileKind final_kind, env->GetFileKind(final_dir));
  if (final_kind != FileKind::kMissing) {
    return FileError(absl::StatusCode::kAlreadyExists, final_dir, "already committed");
  }
  const std::string tmp_dir = final_dir + ".tmp";
  RETURN_IF_ERROR(env->RemoveAll(tmp_dir));  // a leftover of an earlier, unfinished attempt
  RETURN_IF_ERROR(env->CreateDir(tmp_dir));
  for (size_t t = 0; t < layout.table_rows.size(); ++t) {
    int i = static_cast<int>(t);
    ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file,
                     env->NewWritableFile(JoinPath(tmp_dir, TableFileName(i))));
    // Blocks are allocated now, so that a full disk is an error here and not a SIGBUS in a
    // server writing rows through its mapping of the file.
    RETURN_IF_ERROR(file->Allocate(TableFileBytes(layout, i)));
    RETURN_IF_ERROR(file->Close());
  }
  return tmp_dir;
}

absl::Status CommitCheckpoint(const std::string& tmp_dir_arg, const CheckpointLayout& layout,
                              const std::vector<uint64_t>& table_checksums,
                              const std::vector<DenseEntry>& dense,
                              const std::vector<int64_t>& reader_positions, std::string* final_dir,
                              Env* env) {
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

  RETURN_IF_ERROR(SyncDataFiles(tmp_dir, layout, env));

  const fs::path root = tmp_path.parent_path().empty() ? fs::path(".") : tmp_path.parent_path();
  const std::string final_path = (root / CheckpointDirName(layout.step)).string();
  ASSIGN_OR_RETURN(FileKind final_kind, env->GetFileKind(final_path));
  if (final_kind != FileKind::kMissing) {
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
  RETURN_IF_ERROR(WriteFileDurably(JoinPath(tmp_dir, kManifestName), ManifestToJson(m), env));
  RETURN_IF_ERROR(Publish(tmp_dir, final_path, root.string(), env));
  if (final_dir != nullptr) *final_dir = final_path;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<TableWriter>> TableWriter::Open(const std::string& tmp_dir,
                                                               int table, int64_t rows,
                                                               int payload_floats, Env* env) {
  if (table < 0 || rows < 1 || payload_floats < 1 ||
      rows > std::numeric_limits<int64_t>::max() / 8 / payload_floats) {
    return absl::InvalidArgumentError(absl::StrCat("TableWriter: table ", table, ", rows ", rows,
                                                   ", payload_floats ", payload_floats));
  }
  std::string path = JoinPath(tmp_dir, TableFileName(table));
  absl::StatusOr<int64_t> size = env->GetFileSize(path);
  if (absl::IsNotFound(size.status())) {
    return FileError(absl::StatusCode::kFailedPrecondition, path,
                     "missing (BeginCheckpoint creates it)");
  }
  RETURN_IF_ERROR(size.status());
  const int64_t expected = rows * payload_floats * 4;
  if (*size != expected) {
    return FileError(absl::StatusCode::kFailedPrecondition, path,
                     absl::StrCat("size is ", *size, " bytes, expected ", expected, " (", rows,
                                  " rows of ", payload_floats, " floats)"));
  }
  // Rows go through a shared mapping: a server's rows are interleaved with the other servers'
  // in the file, and one pwrite per row would cost a system call per row.
  ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, env->NewMappedFile(path, expected));
  return std::unique_ptr<TableWriter>(new TableWriter(std::move(file), rows, payload_floats));
}

absl::Status TableWriter::WriteRows(const int64_t* rows, const float* payloads, int64_t n) {
  if (file_ == nullptr) {
    return FileError(absl::StatusCode::kFailedPrecondition, path_, "already finished");
  }
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
    std::memcpy(file_->data() + rows[i] * row_bytes, src, static_cast<size_t>((j - i) * row_bytes));
    for (int64_t k = i; k < j; ++k) {
      checksum_ ^= RowChecksum(rows[k], payloads + k * payload_floats_, payload_floats_);
    }
    rows_written_ += j - i;
    i = j;
  }
  return absl::OkStatus();
}

absl::Status TableWriter::Finish() {
  if (file_ == nullptr) {
    return FileError(absl::StatusCode::kFailedPrecondition, path_, "already finished");
  }
  std::unique_ptr<MappedFile> file = std::move(file_);
  RETURN_IF_ERROR(file->Sync());
  return file->Close();
}

absl::StatusOr<DenseEntry> WriteDense(const std::string& tmp_dir, int tensor, int64_t version,
                                      const std::vector<float>& weights,
                                      const std::vector<float>& state, Env* env) {
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

  const std::string path = JoinPath(tmp_dir, DenseFileName(tensor));
  absl::StatusOr<std::unique_ptr<WritableFile>> file = env->NewWritableFile(path);
  if (absl::IsNotFound(file.status())) {
    return FileError(absl::StatusCode::kFailedPrecondition, tmp_dir,
                     "missing (BeginCheckpoint creates it)");
  }
  RETURN_IF_ERROR(file.status());
  const size_t weight_bytes = static_cast<size_t>(header.size) * 4;
  const size_t state_bytes = static_cast<size_t>(header.state_floats) * 4;
  Hash64Stream hash(0);
  hash.Update(&header, sizeof(header));
  hash.Update(weights.data(), weight_bytes);
  hash.Update(state.data(), state_bytes);
  // sizeof(header) is kDenseHeaderBytes: the weights and the state follow it.
  RETURN_IF_ERROR(
      (*file)->Append(absl::string_view(reinterpret_cast<const char*>(&header), sizeof(header))));
  RETURN_IF_ERROR((*file)->Append(
      absl::string_view(reinterpret_cast<const char*>(weights.data()), weight_bytes)));
  RETURN_IF_ERROR(
      (*file)->Append(absl::string_view(reinterpret_cast<const char*>(state.data()), state_bytes)));
  RETURN_IF_ERROR((*file)->Sync());
  RETURN_IF_ERROR((*file)->Close());
  return DenseEntry{version, hash.Digest()};
}

}  // namespace ecps
