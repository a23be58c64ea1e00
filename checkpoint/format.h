// The checkpoint format's vocabulary (docs/checkpoints.md, "Checkpoint format"): what a
// checkpoint holds, its file names and sizes, the dense file's header, and the row checksums.
// Pure functions and plain structs; checkpoint/checkpoint.h tells the life of a checkpoint.
#ifndef ECPS_CHECKPOINT_FORMAT_H_
#define ECPS_CHECKPOINT_FORMAT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace ecps {

// The manifest's format version this build writes and the only one it reads.
inline constexpr int kCheckpointFormatVersion = 1;
// Size of a dense file's header (dense-TTT.bin), in bytes.
inline constexpr int64_t kDenseHeaderBytes = 48;
// The file whose presence makes a directory step-N a checkpoint.
inline constexpr char kManifestName[] = "MANIFEST.json";

// What a checkpoint holds, known before any data is written.
struct CheckpointLayout {
  std::string job;                          // job name (informational)
  int64_t step = 0;                         // global step the checkpoint captures
  int dim = 0;                              // embedding dimension
  int payload_floats = 0;                   // floats per row: dim weights + optimizer state
  std::string sparse_optimizer;             // e.g. "adagrad" (spec: optimizer.sparse.type)
  std::string dense_optimizer;              // e.g. "adam" (spec: optimizer.dense.type)
  std::vector<int64_t> table_rows;          // rows per embedding table
  std::vector<int64_t> dense_sizes;         // weights per dense tensor
  std::vector<int64_t> dense_state_floats;  // optimizer-state floats per dense tensor

  bool operator==(const CheckpointLayout&) const = default;
};

// What the writer of one dense tensor reports to the committer.
struct DenseEntry {
  int64_t version = 0;    // the tensor's version (its optimizer step)
  uint64_t checksum = 0;  // XXH64 of the whole dense file

  bool operator==(const DenseEntry&) const = default;
};

// A parsed MANIFEST.json.
struct Manifest {
  std::string dir;  // checkpoint directory it was read from (for error messages)
  int format_version = 0;
  std::string created;  // creation time, RFC 3339 UTC (informational)
  CheckpointLayout layout;
  std::vector<uint64_t> table_checksums;  // one per table
  std::vector<DenseEntry> dense;          // one per dense tensor
  std::vector<int64_t> reader_positions;  // one per worker: samples consumed so far
};

// The 48-byte header of a dense file, as it is on disk (all fields little-endian).
struct DenseHeader {
  char magic[8];  // kDenseMagic
  uint32_t format_version;
  uint32_t tensor;
  int64_t size;
  int64_t state_floats;
  int64_t version;
  uint64_t reserved;  // 0
};
static_assert(sizeof(DenseHeader) == kDenseHeaderBytes);
inline constexpr char kDenseMagic[8] = {'E', 'C', 'P', 'S', 'D', 'N', 'S', '1'};

// ---- Names and sizes (pure functions; the layout must be valid) -------------------------

// "step-000001234" (9 digits at least; longer for steps >= 10^9).
std::string CheckpointDirName(int64_t step);
// "table-007.rows", "dense-012.bin" (3 digits at least).
std::string TableFileName(int table);
std::string DenseFileName(int tensor);
// Exact sizes of a table file and a dense file.
int64_t TableFileBytes(const CheckpointLayout& layout, int table);
int64_t DenseFileBytes(const CheckpointLayout& layout, int tensor);

// OK when the layout is internally consistent (positive sizes, payload_floats >= dim, one
// state size per dense tensor, no size overflow); INVALID_ARGUMENT naming the field otherwise.
absl::Status ValidateLayout(const CheckpointLayout& layout);

// ---- Checksums (XXH64: runtime/hash.h) ----------------------------------------------------

// A row's contribution to its table's checksum: Hash64(payload bytes, seed = row).
uint64_t RowChecksum(int64_t row, const float* payload, int payload_floats);
// Combines partial table checksums (XOR): any grouping and order gives the same result.
uint64_t CombineChecksums(const std::vector<uint64_t>& partials);
// A checksum as the manifest writes it: 16 lowercase hex digits.
std::string HexChecksum(uint64_t checksum);

}  // namespace ecps

#endif  // ECPS_CHECKPOINT_FORMAT_H_
