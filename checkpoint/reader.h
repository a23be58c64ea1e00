// The reader side of a checkpoint (docs/checkpoints.md, "Checkpoint format"): whole-file
// verification, rows by id (for resharding) and dense tensors. The manifest comes from
// ReadManifest (checkpoint/manifest.h).
#ifndef ECPS_CHECKPOINT_READER_H_
#define ECPS_CHECKPOINT_READER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "checkpoint/format.h"

namespace ecps {

// Reads table `table` whole and checks its size and checksum. DATA_LOSS naming the file.
absl::Status VerifyTable(const Manifest& manifest, int table);
// Reads the manifest and every file of the checkpoint and checks every size and checksum;
// the first failure is returned, naming its file.
absl::Status VerifyCheckpoint(const std::string& dir);

// Random access to the rows of one table file (by logical row id, for resharding).
// Thread-safe: ReadRows may be called concurrently.
class TableReader {
 public:
  // Opens DIR/table-TTT.rows of `manifest` and checks its size (not its checksum: see
  // VerifyTable). INVALID_ARGUMENT for a table out of range; DATA_LOSS naming the file
  // when it is missing or its size differs from the manifest's.
  static absl::StatusOr<std::unique_ptr<TableReader>> Open(const Manifest& manifest, int table);
  ~TableReader();
  TableReader(const TableReader&) = delete;
  TableReader& operator=(const TableReader&) = delete;

  // Reads the payloads of rows[0..n) into out[i * payload_floats ..]. Ids may come in any
  // order and repeat; ascending ids that are consecutive, or close together, are read with
  // one pread. INVALID_ARGUMENT (nothing read) when an id is out of range.
  absl::Status ReadRows(const int64_t* rows, int64_t n, float* out) const;

  int64_t rows() const { return rows_; }
  int payload_floats() const { return payload_floats_; }

 private:
  TableReader(std::string path, int fd, int64_t rows, int payload_floats)
      : path_(std::move(path)), fd_(fd), rows_(rows), payload_floats_(payload_floats) {}

  const std::string path_;
  const int fd_;
  const int64_t rows_;
  const int payload_floats_;
};

// Reads dense tensor `tensor` of the checkpoint and checks its header, size and checksum
// against the manifest (dense files are small, so always verified). DATA_LOSS naming the
// file on any mismatch; INVALID_ARGUMENT for a tensor out of range.
absl::Status ReadDense(const Manifest& manifest, int tensor, std::vector<float>* weights,
                       std::vector<float>* state, int64_t* version);

}  // namespace ecps

#endif  // ECPS_CHECKPOINT_READER_H_
