// The on-disk checkpoint format (docs/checkpoints.md, "Checkpoint format").
//
// A checkpoint is one directory ROOT/step-NNNNNNNNN/ holding
//   table-TTT.rows   per embedding table: every row's payload (weights + sparse optimizer
//                    state, float32 little-endian) in LOGICAL row order, row i at byte offset
//                    i * payload_floats * 4; exactly rows * payload_floats * 4 bytes.
//   dense-TTT.bin    per dense tensor: a 48-byte header, the weights, the optimizer state.
//   MANIFEST.json    written last: layout, per-file sizes and checksums, reader positions.
//
// Life of a checkpoint:
//   1. The coordinator calls BeginCheckpoint: it creates ROOT/step-N.tmp/ with every table
//      file pre-sized.
//   2. Servers, in parallel and in any number of processes, open TableWriters on the table
//      files and write the rows they hold at their logical offsets (disjoint rows, each row
//      exactly once over all writers), then Finish(); each reports its partial checksum.
//      The owner of each dense tensor calls WriteDense.
//   3. The coordinator XOR-combines the partial checksums (CombineChecksums) and calls
//      CommitCheckpoint, which writes MANIFEST.json atomically and renames step-N.tmp to
//      step-N. Only a directory named step-N with a MANIFEST.json is a checkpoint; a crash at
//      any point leaves either the previous state or a *.tmp directory that readers ignore.
//   4. Readers find it with LatestCheckpoint, read the manifest, optionally verify the whole
//      checkpoint, and read any rows by id (a server of a resized cluster reads only the rows
//      it now holds).
//
// Checksums are order independent, so writers holding any subsets of rows compute theirs
// independently: a table's checksum is the XOR over its rows of RowChecksum(row, payload), a
// 64-bit XXH64 of the payload bytes seeded by the row id.
//
// Errors: every error about a file names it (its full path). Corrupt or truncated data and
// malformed manifests are DATA_LOSS, a missing checkpoint or manifest NOT_FOUND, wrong
// arguments INVALID_ARGUMENT, a checkpoint that does not fit the caller's model
// FAILED_PRECONDITION, I/O failures INTERNAL with the errno text.
#ifndef ECPS_RUNTIME_CHECKPOINT_H_
#define ECPS_RUNTIME_CHECKPOINT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ecps {

// The manifest's format version this build writes and the only one it reads.
inline constexpr int kCheckpointFormatVersion = 1;
// Size of a dense file's header (dense-TTT.bin), in bytes.
inline constexpr int64_t kDenseHeaderBytes = 48;

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

// ---- Checksums ---------------------------------------------------------------------------

// XXH64 (the reference algorithm, byte-compatible with xxhsum -H64) of `bytes` with `seed`.
uint64_t Hash64(const void* data, size_t bytes, uint64_t seed);
// A row's contribution to its table's checksum: Hash64(payload bytes, seed = row).
uint64_t RowChecksum(int64_t row, const float* payload, int payload_floats);
// Combines partial table checksums (XOR): any grouping and order gives the same result.
uint64_t CombineChecksums(const std::vector<uint64_t>& partials);

// ---- Coordinator side --------------------------------------------------------------------

// Creates ROOT (if needed) and ROOT/step-N.tmp/ (N = layout.step) with every table file
// pre-sized (sparse, all zeros) and returns that directory. A leftover step-N.tmp from an
// earlier attempt is removed first. ALREADY_EXISTS when ROOT/step-N is already committed;
// INVALID_ARGUMENT for an invalid layout. Only one coordinator may run it per ROOT.
absl::StatusOr<std::string> BeginCheckpoint(const std::string& root,
                                            const CheckpointLayout& layout);

// Publishes the checkpoint begun in `tmp_dir` (which BeginCheckpoint returned for the same
// layout) after every writer finished: checks that every file exists with its exact size,
// fsyncs every file, writes MANIFEST.json (tmp file, fsync, rename), fsyncs the directory,
// renames step-N.tmp to step-N and fsyncs ROOT. `table_checksums` are the combined checksums
// (one per table), `dense` one entry per dense tensor, `reader_positions` one per worker.
// On OK *final_dir (if not null) is the committed directory. It does not read the data back:
// a missing or doubly written row is caught by VerifyCheckpoint, not here. On error nothing
// is published (the tmp directory may be left behind; LatestCheckpoint ignores it).
absl::Status CommitCheckpoint(const std::string& tmp_dir, const CheckpointLayout& layout,
                              const std::vector<uint64_t>& table_checksums,
                              const std::vector<DenseEntry>& dense,
                              const std::vector<int64_t>& reader_positions, std::string* final_dir);

// Committed checkpoints under ROOT (directories step-N holding a MANIFEST.json), newest
// (highest step) first. *.tmp directories and other entries are ignored. An absent ROOT
// gives an empty list. Does not read or verify the manifests.
absl::StatusOr<std::vector<std::string>> ListCheckpoints(const std::string& root);
// The newest committed checkpoint under ROOT; NOT_FOUND naming ROOT when there is none.
absl::StatusOr<std::string> LatestCheckpoint(const std::string& root);

// Deletes old checkpoints under ROOT so that `keep` committed ones remain: the one of step
// `keep_step` when it is committed (normally the one just written; -1: none) and the newest
// others. Also deletes what a crashed save or an interrupted prune left behind below the newest
// committed step: step-N.tmp directories and step-N directories without a MANIFEST.json.
// Nothing else under ROOT is touched. A checkpoint is unpublished first (its MANIFEST.json
// removed and the directory fsynced) and then removed, so an interrupted prune leaves only a
// directory that readers ignore. Returns the removed directories, oldest first; on an error
// (naming the path) it stops there, having removed the ones before. INVALID_ARGUMENT when
// keep < 1. Not safe against a save, load or prune of the same ROOT at the same time: the
// caller serialises them (the coordinator does).
absl::StatusOr<std::vector<std::string>> PruneCheckpoints(const std::string& root, int keep,
                                                          int64_t keep_step = -1);

// ---- Writer side (a server) --------------------------------------------------------------

// Writes rows of one pre-sized table file at their logical offsets. Any number of writers,
// in any processes, may write the same file at once, provided their rows are disjoint.
// Not thread-safe: one instance per thread.
class TableWriter {
 public:
  // Opens TMP_DIR/table-TTT.rows, created by BeginCheckpoint. FAILED_PRECONDITION naming the
  // file when it is missing or its size is not rows * payload_floats * 4.
  static absl::StatusOr<std::unique_ptr<TableWriter>> Open(const std::string& tmp_dir, int table,
                                                           int64_t rows, int payload_floats);
  ~TableWriter();
  TableWriter(const TableWriter&) = delete;
  TableWriter& operator=(const TableWriter&) = delete;

  // Writes rows[i]'s payload, payloads[i * payload_floats .. +payload_floats), for i < n.
  // The file is mapped: rows are copied into the page cache, with no system call per row
  // (a server's rows are interleaved with the other servers' in the file). Every id
  // is checked first: INVALID_ARGUMENT (nothing written) when one is out of range. Each row
  // must be written exactly once over all writers of the table: the checksum counts it each
  // time, so a row written twice or never fails verification.
  absl::Status WriteRows(const int64_t* rows, const float* payloads, int64_t n);

  // Makes the written rows durable (msync, fdatasync) and closes the file. Call once, after the
  // last WriteRows and before reporting the checksum to the committer.
  absl::Status Finish();

  // XOR of RowChecksum over every row written so far.
  uint64_t checksum() const { return checksum_; }
  int64_t rows_written() const { return rows_written_; }

 private:
  TableWriter(std::string path, int fd, char* map, int64_t rows, int payload_floats)
      : path_(std::move(path)), fd_(fd), map_(map), rows_(rows), payload_floats_(payload_floats) {}

  const std::string path_;
  int fd_;
  char* map_;  // the whole file, mapped shared; rows are copied in
  size_t MapBytes() const { return static_cast<size_t>(rows_) * payload_floats_ * sizeof(float); }
  const int64_t rows_;
  const int payload_floats_;
  uint64_t checksum_ = 0;
  int64_t rows_written_ = 0;
};

// Writes TMP_DIR/dense-TTT.bin (header, weights, state) and fdatasyncs it; returns the entry
// the committer needs. INVALID_ARGUMENT when tensor < 0, weights is empty or version < 0.
absl::StatusOr<DenseEntry> WriteDense(const std::string& tmp_dir, int tensor, int64_t version,
                                      const std::vector<float>& weights,
                                      const std::vector<float>& state);

// ---- Reader side -------------------------------------------------------------------------

// Reads and strictly parses DIR/MANIFEST.json. NOT_FOUND "DIR/MANIFEST.json: missing";
// DATA_LOSS "DIR/MANIFEST.json: not valid: <why>" for bad JSON, an unknown, missing,
// duplicated or mistyped field, an invalid layout, a count that disagrees with the layout,
// a file name or byte size that disagrees with the layout; FAILED_PRECONDITION for a format
// version this build does not read.
absl::StatusOr<Manifest> ReadManifest(const std::string& dir);
// The same checks on the manifest's text (errors are the reasons, without the file name):
// what ReadManifest and the fuzz target run.
absl::StatusOr<Manifest> ParseManifest(absl::string_view text, const std::string& dir);

// FAILED_PRECONDITION naming DIR/MANIFEST.json and the field when the checkpoint cannot be
// loaded into `expected`: dim, payload_floats, optimizers, table rows, dense sizes and state
// sizes must be equal (job and step are not compared).
absl::Status CheckLayoutMatches(const Manifest& manifest, const CheckpointLayout& expected);

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

#endif  // ECPS_RUNTIME_CHECKPOINT_H_
