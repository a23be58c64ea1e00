// The writer side of a checkpoint (docs/checkpoints.md, "Checkpoint format"): the
// coordinator begins and commits it, servers write table rows and dense tensors in between.
// See checkpoint/checkpoint.h for the life of a checkpoint. Every file goes through `env`
// (runtime/env.h), the POSIX one unless a test injects faults.
#ifndef ECPS_CHECKPOINT_WRITER_H_
#define ECPS_CHECKPOINT_WRITER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "checkpoint/format.h"
#include "runtime/env.h"

namespace ecps {

// ---- Coordinator side --------------------------------------------------------------------

// Creates ROOT (if needed) and ROOT/step-N.tmp/ (N = layout.step) with every table file
// pre-sized (sparse, all zeros) and returns that directory. A leftover step-N.tmp from an
// earlier attempt is removed first. ALREADY_EXISTS when ROOT/step-N is already committed;
// INVALID_ARGUMENT for an invalid layout. Only one coordinator may run it per ROOT.
absl::StatusOr<std::string> BeginCheckpoint(const std::string& root, const CheckpointLayout& layout,
                                            Env* env = Env::Default());

// Publishes the checkpoint begun in `tmp_dir` (which BeginCheckpoint returned for the same
// layout) after every writer finished: checks that every file exists with its exact size,
// fsyncs every file, writes MANIFEST.json (tmp file, fsync, rename), fsyncs the directory,
// renames step-N.tmp to step-N and fsyncs ROOT. `table_checksums` are the combined checksums
// (one per table), `dense` one entry per dense tensor, `reader_positions` one per worker.
// On OK *final_dir (if not null) is the committed directory. It does not read the data back:
// a missing or doubly written row is caught by VerifyCheckpoint, not here. On error nothing
// is published (the tmp directory may be left behind; LatestCheckpoint ignores it): when the
// fsync of ROOT after the rename fails, step-N is renamed back to step-N.tmp, and only if that
// fails too is the (complete) checkpoint left published, which the error then says.
absl::Status CommitCheckpoint(const std::string& tmp_dir, const CheckpointLayout& layout,
                              const std::vector<uint64_t>& table_checksums,
                              const std::vector<DenseEntry>& dense,
                              const std::vector<int64_t>& reader_positions, std::string* final_dir,
                              Env* env = Env::Default());

// ---- Server side -------------------------------------------------------------------------

// Writes rows of one pre-sized table file at their logical offsets. Any number of writers,
// in any processes, may write the same file at once, provided their rows are disjoint.
// Not thread-safe: one instance per thread.
class TableWriter {
 public:
  // Opens TMP_DIR/table-TTT.rows, created by BeginCheckpoint. FAILED_PRECONDITION naming the
  // file when it is missing or its size is not rows * payload_floats * 4.
  static absl::StatusOr<std::unique_ptr<TableWriter>> Open(const std::string& tmp_dir, int table,
                                                           int64_t rows, int payload_floats,
                                                           Env* env = Env::Default());
  ~TableWriter() = default;
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
  TableWriter(std::unique_ptr<MappedFile> file, int64_t rows, int payload_floats)
      : path_(file->path()), file_(std::move(file)), rows_(rows), payload_floats_(payload_floats) {}

  const std::string path_;
  std::unique_ptr<MappedFile> file_;  // the whole file, mapped shared; null once finished
  const int64_t rows_;
  const int payload_floats_;
  uint64_t checksum_ = 0;
  int64_t rows_written_ = 0;
};

// Writes TMP_DIR/dense-TTT.bin (header, weights, state) and fdatasyncs it; returns the entry
// the committer needs. INVALID_ARGUMENT when tensor < 0, weights is empty or version < 0.
absl::StatusOr<DenseEntry> WriteDense(const std::string& tmp_dir, int tensor, int64_t version,
                                      const std::vector<float>& weights,
                                      const std::vector<float>& state, Env* env = Env::Default());

}  // namespace ecps

#endif  // ECPS_CHECKPOINT_WRITER_H_
