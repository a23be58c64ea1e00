// Training data: a deterministic synthetic Criteo-like generator and readers for the real
// Criteo formats, behind one DataSource interface (one partition of one data set).
//
// Sample layout (both sources): 13 dense features transformed x -> log(1 + max(x, 0)); 26
// sparse features, each already a row id in [0, model.table_rows[f]); label 0 or 1.
// docs/model.md describes the generator's hidden model, the partitioning and the splits.
#ifndef ECPS_WORKER_DATA_H_
#define ECPS_WORKER_DATA_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/spec.h"

namespace ecps {

struct Batch {
  int size = 0;
  std::vector<float> dense;     // size*num_dense, already log(1+max(x,0))
  std::vector<int64_t> sparse;  // size*num_sparse, row ids in [0, table_rows[f])
  std::vector<float> labels;    // size
};

// One partition of a data set. Not thread-safe.
class DataSource {
 public:
  virtual ~DataSource();

  // Fills *out with up to batch_size samples (reusing its capacity); out->size is how many.
  // Returns false, with out->size possibly > 0, once the partition is exhausted (a call after
  // that returns false with size 0); an endless synthetic source never returns false.
  // INVALID_ARGUMENT naming file and line once more than data.max_bad_lines malformed lines
  // were seen; other I/O failures: UNAVAILABLE.
  virtual absl::StatusOr<bool> Next(int batch_size, Batch* out) = 0;

  // This partition's records consumed so far: the reader offset reported to the coordinator
  // and saved in checkpoints. (Criteo: malformed lines count too, since they were consumed.)
  // Over data.epochs it counts every pass (a pass holds the same number of the partition's
  // lines each time), so the position names the epoch as well: position / lines per pass.
  virtual int64_t position() const = 0;

  // The pass over the data the last line read belongs to, 0-based (data.epochs; the
  // synthetic source has one).
  virtual int64_t epoch() const { return 0; }

  // Resumes at `position` (as returned by position()). Synthetic: O(1). Criteo in file order:
  // re-reads the files from the start without parsing the skipped lines, the first pass only
  // (then it knows a pass's length and jumps to the position's epoch); shuffled: reads the
  // one block the position lies in. bad_lines() restarts from 0.
  virtual absl::Status Seek(int64_t position) = 0;

  virtual int64_t bad_lines() const = 0;
  // "file:line: reason" for the first few malformed lines.
  virtual std::vector<std::string> bad_line_examples() const = 0;
};

// Opens partition `partition` of `num_partitions` of the data set `data` describes.
//
// Synthetic: sample k of partition p is global sample k*num_partitions + p of the training
// stream (seeded by `seed`); data.synthetic.num_samples > 0 bounds the global range.
// eval=true reads the held-out stream instead (a different hash stream, so disjoint from
// training), which is endless unless max_samples > 0.
// Criteo (criteo_tsv | criteo_csv): data lines are numbered r = 0, 1, ... across data.paths
// in order (CSV header lines excluded); with m = round(1/eval_fraction), line r is held out
// for evaluation when r % m == m - 1 (no line when eval_fraction == 0). Within the chosen
// split, the i-th line goes to partition i % num_partitions.
// Training split only: data.epochs passes over it, each in file order, or with data.shuffle
// each in its own seeded order (worker/criteo_blocks.h; the partitions are then dealt after
// the shuffle). A malformed line counts against data.max_bad_lines once, in the first pass.
// max_samples > 0 caps this partition's position() at max_samples.
//
// Every criteo file is checked first; INVALID_ARGUMENT naming the file and what is wrong when
// it is missing, unreadable or not a regular file (a directory, a FIFO, a device), is
// compressed (gzip, bzip2, xz, zstd, zip), is binary (a NUL byte, or over 30 % of non-text
// bytes, in its first 4 KiB), has no data rows (empty, blank, or only a CSV header), or has no
// line that parses among its first 100 data lines (text that is not Criteo data).
// INVALID_ARGUMENT too for an inconsistent configuration (table_rows size, unknown source,
// partition out of range, criteo with num_dense != 13 or num_sparse != 26).
//
// A malformed line (skipped and counted, see Next) is one without 40 columns, with a label
// other than 0 or 1, an integer column that is not a number or is past the int64 range
// (integers may be written as floats, "260.0"), or a categorical that is not hexadecimal or is
// past 64 bits.
absl::StatusOr<std::unique_ptr<DataSource>> MakeDataSource(const DataSection& data,
                                                           const ModelSection& model, uint64_t seed,
                                                           int partition, int num_partitions,
                                                           bool eval, int64_t max_samples = 0);

// The AUC of the synthetic hidden model's own true label probabilities on the first
// `samples` held-out samples: the best AUC any model can expect on that data.
absl::StatusOr<double> SyntheticCeilingAuc(const DataSection& data, const ModelSection& model,
                                           uint64_t seed, int64_t samples);

// Parses one Criteo line (label, I1..I13, C1..C26; tab- or comma-separated) into one sample
// (13 dense floats, 26 row ids within `rows`, the label); on a malformed line sets *reason
// (naming the column) and returns false. Exposed for its fuzz target.
bool ParseCriteoLine(std::string_view line, bool csv, const std::vector<int64_t>& rows,
                     float* dense, int64_t* sparse, float* label, std::string* reason);

// The row a raw Criteo categorical value maps to (kernels/row_hash.h, CategoricalRow):
// 1 + HashOf(0xC817E0, table, raw) % (table_rows - 1).
// Row 0 is reserved for a missing value (and is the only row when table_rows == 1).
int64_t CriteoRowId(uint64_t raw, int table, int64_t table_rows);

}  // namespace ecps

#endif  // ECPS_WORKER_DATA_H_
