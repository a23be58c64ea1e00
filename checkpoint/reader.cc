#include "checkpoint/reader.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "checkpoint/manifest.h"
#include "runtime/hash.h"
#include "runtime/posix_file.h"
#include "runtime/status_macros.h"

namespace ecps {
namespace {

// Reads of ascending row ids merge into one pread when the gap between two ids is at most
// this many bytes (a pread costs about as much as copying a few KiB from the page cache)...
constexpr int64_t kMaxReadGapBytes = 8 << 10;
// ...and the merged span stays within this many bytes.
constexpr int64_t kMaxReadSpanBytes = 4 << 20;
// Whole-table verification reads this much at a time.
constexpr int64_t kVerifyChunkBytes = 8 << 20;

// Opens a data file of the checkpoint read-only; DATA_LOSS naming it when it is missing or its
// size is not the `expected` one the manifest implies. The caller owns the descriptor.
absl::StatusOr<int> OpenWithManifestSize(const std::string& path, int64_t expected) {
  ASSIGN_OR_RETURN(int fd, OpenForRead(path, absl::StatusCode::kDataLoss));
  FdCloser closer(fd);
  ASSIGN_OR_RETURN(int64_t size, FileSize(fd, path));
  if (size != expected) {
    return FileError(absl::StatusCode::kDataLoss, path,
                     absl::StrCat("size is ", size, " bytes, the manifest says ", expected,
                                  size < expected ? " (truncated)" : ""));
  }
  return closer.release();
}

}  // namespace

absl::StatusOr<std::unique_ptr<TableReader>> TableReader::Open(const Manifest& manifest,
                                                               int table) {
  const CheckpointLayout& l = manifest.layout;
  if (table < 0 || table >= static_cast<int>(l.table_rows.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("table ", table, " out of range [0, ", l.table_rows.size(), ")"));
  }
  std::string path = JoinPath(manifest.dir, TableFileName(table));
  ASSIGN_OR_RETURN(int fd, OpenWithManifestSize(path, TableFileBytes(l, table)));
  FdCloser closer(fd);
  return std::unique_ptr<TableReader>(
      new TableReader(std::move(path), closer.release(), l.table_rows[table], l.payload_floats));
}

TableReader::~TableReader() { ::close(fd_); }

absl::Status TableReader::ReadRows(const int64_t* rows, int64_t n, float* out) const {
  if (n < 0 || (n > 0 && (rows == nullptr || out == nullptr))) {
    return absl::InvalidArgumentError(absl::StrCat("ReadRows: n is ", n));
  }
  for (int64_t i = 0; i < n; ++i) {
    if (rows[i] < 0 || rows[i] >= rows_) {
      return FileError(absl::StatusCode::kInvalidArgument, path_,
                       absl::StrCat("row ", rows[i], " out of range [0, ", rows_, ")"));
    }
  }
  const int64_t row_bytes = int64_t{payload_floats_} * 4;
  std::vector<float> scratch;
  int64_t i = 0;
  while (i < n) {
    // Grow a window of ascending ids: consecutive ids without limit, and across small gaps
    // while the span stays small.
    const int64_t first = rows[i];
    bool consecutive = true;
    int64_t j = i;
    while (j + 1 < n && rows[j + 1] > rows[j]) {
      if (consecutive && rows[j + 1] == rows[j] + 1) {
        ++j;
        continue;
      }
      if ((rows[j + 1] - rows[j] - 1) * row_bytes > kMaxReadGapBytes ||
          (rows[j + 1] - first + 1) * row_bytes > kMaxReadSpanBytes) {
        break;
      }
      consecutive = false;
      ++j;
    }
    const int64_t span_rows = rows[j] - first + 1;
    if (consecutive) {
      RETURN_IF_ERROR(PreadExact(fd_, path_, out + i * payload_floats_, span_rows * row_bytes,
                                 first * row_bytes));
    } else {
      scratch.resize(static_cast<size_t>(span_rows * payload_floats_));
      RETURN_IF_ERROR(
          PreadExact(fd_, path_, scratch.data(), span_rows * row_bytes, first * row_bytes));
      for (int64_t k = i; k <= j; ++k) {
        std::memcpy(out + k * payload_floats_, scratch.data() + (rows[k] - first) * payload_floats_,
                    static_cast<size_t>(row_bytes));
      }
    }
    i = j + 1;
  }
  return absl::OkStatus();
}

absl::Status VerifyTable(const Manifest& manifest, int table) {
  ASSIGN_OR_RETURN(std::unique_ptr<TableReader> reader, TableReader::Open(manifest, table));
  const std::string path = JoinPath(manifest.dir, TableFileName(table));
  const int pf = reader->payload_floats();
  const int64_t rows = reader->rows();
  const int64_t chunk_rows = std::max<int64_t>(1, kVerifyChunkBytes / (int64_t{pf} * 4));
  std::vector<float> buffer(static_cast<size_t>(std::min(chunk_rows, rows) * pf));
  std::vector<int64_t> ids;
  uint64_t checksum = 0;
  for (int64_t start = 0; start < rows; start += chunk_rows) {
    const int64_t count = std::min(chunk_rows, rows - start);
    ids.resize(static_cast<size_t>(count));
    for (int64_t k = 0; k < count; ++k) ids[k] = start + k;
    RETURN_IF_ERROR(reader->ReadRows(ids.data(), count, buffer.data()));
    for (int64_t k = 0; k < count; ++k) {
      checksum ^= RowChecksum(start + k, buffer.data() + k * pf, pf);
    }
  }
  if (checksum != manifest.table_checksums[table]) {
    return FileError(
        absl::StatusCode::kDataLoss, path,
        absl::StrCat("checksum mismatch: contents hash to ", HexChecksum(checksum),
                     ", the manifest says ", HexChecksum(manifest.table_checksums[table]),
                     " (corrupt, or rows missing or written twice)"));
  }
  return absl::OkStatus();
}

absl::Status ReadDense(const Manifest& manifest, int tensor, std::vector<float>* weights,
                       std::vector<float>* state, int64_t* version) {
  const CheckpointLayout& l = manifest.layout;
  if (tensor < 0 || tensor >= static_cast<int>(l.dense_sizes.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("dense tensor ", tensor, " out of range [0, ", l.dense_sizes.size(), ")"));
  }
  const std::string path = JoinPath(manifest.dir, DenseFileName(tensor));
  ASSIGN_OR_RETURN(int fd, OpenWithManifestSize(path, DenseFileBytes(l, tensor)));
  FdCloser closer(fd);
  DenseHeader header;
  std::vector<float> w(static_cast<size_t>(l.dense_sizes[tensor]));
  std::vector<float> s(static_cast<size_t>(l.dense_state_floats[tensor]));
  const int64_t weight_bytes = l.dense_sizes[tensor] * 4;
  const int64_t state_bytes = l.dense_state_floats[tensor] * 4;
  RETURN_IF_ERROR(PreadExact(fd, path, &header, sizeof(header), 0));
  RETURN_IF_ERROR(PreadExact(fd, path, w.data(), weight_bytes, kDenseHeaderBytes));
  RETURN_IF_ERROR(PreadExact(fd, path, s.data(), state_bytes, kDenseHeaderBytes + weight_bytes));
  Hash64Stream hash(0);
  hash.Update(&header, sizeof(header));
  hash.Update(w.data(), static_cast<size_t>(weight_bytes));
  hash.Update(s.data(), static_cast<size_t>(state_bytes));
  const DenseEntry& entry = manifest.dense[tensor];
  if (hash.Digest() != entry.checksum) {
    return FileError(
        absl::StatusCode::kDataLoss, path,
        absl::StrCat("checksum mismatch: contents hash to ", HexChecksum(hash.Digest()),
                     ", the manifest says ", HexChecksum(entry.checksum)));
  }
  // The checksum matched, so a bad header means the writer and the manifest disagree.
  if (std::memcmp(header.magic, kDenseMagic, sizeof(kDenseMagic)) != 0 ||
      header.format_version != kCheckpointFormatVersion ||
      header.tensor != static_cast<uint32_t>(tensor) || header.size != l.dense_sizes[tensor] ||
      header.state_floats != l.dense_state_floats[tensor] || header.version != entry.version ||
      header.reserved != 0) {
    return FileError(absl::StatusCode::kDataLoss, path,
                     absl::StrCat("header disagrees with the manifest (tensor ", header.tensor,
                                  ", size ", header.size, ", state_floats ", header.state_floats,
                                  ", version ", header.version, ")"));
  }
  *weights = std::move(w);
  *state = std::move(s);
  *version = header.version;
  return absl::OkStatus();
}

absl::Status VerifyCheckpoint(const std::string& dir) {
  ASSIGN_OR_RETURN(Manifest manifest, ReadManifest(dir));
  for (size_t t = 0; t < manifest.layout.table_rows.size(); ++t) {
    RETURN_IF_ERROR(VerifyTable(manifest, static_cast<int>(t)));
  }
  std::vector<float> weights, state;
  int64_t version;
  for (size_t d = 0; d < manifest.layout.dense_sizes.size(); ++d) {
    RETURN_IF_ERROR(ReadDense(manifest, static_cast<int>(d), &weights, &state, &version));
  }
  return absl::OkStatus();
}

}  // namespace ecps
