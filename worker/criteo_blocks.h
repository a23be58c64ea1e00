// The pieces of data.shuffle for Criteo files that need not fit in memory: the data lines
// (numbered r = 0, 1, ... across data.paths, CSV headers excluded, as worker/data.h numbers
// them) are cut into blocks of data.shuffle_block_lines consecutive lines; an epoch visits the
// blocks in a seeded permutation and each block's lines in a seeded permutation of their own.
// One pass over the files (IndexBlocks) finds where every block starts, so a block is read
// with one seek, and a reader resumes in any epoch without reading what lies before.
//
// Held-out lines (eval_fraction) are chosen by r, so shuffling never moves a line between
// the training and the held-out split. The partitions are dealt after the shuffle: the j-th
// training line of an epoch's order goes to partition j % num_partitions, so every worker's
// share changes from epoch to epoch and the shares differ by at most one line.
#ifndef ECPS_WORKER_CRITEO_BLOCKS_H_
#define ECPS_WORKER_CRITEO_BLOCKS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace ecps {

// Whether line `line_no` (1-based) of a file is a CSV header (the first line, not starting
// with a digit), which the readers skip.
inline bool IsCsvHeader(bool csv, int64_t line_no, std::string_view line) {
  return csv && line_no == 1 && !line.empty() && !(line[0] >= '0' && line[0] <= '9');
}

// Where a block's first data line lies: in paths[file], at byte `offset`, after `line_no`
// lines of that file.
struct BlockStart {
  size_t file = 0;
  int64_t offset = 0;
  int64_t line_no = 0;
};

struct BlockIndex {
  std::vector<BlockStart> starts;  // one per block, in file order
  int64_t data_lines = 0;          // every data line of every file (r's range)
};

// Reads every file once, without parsing, and records the start of every `block_lines`-th
// data line. UNAVAILABLE naming the file when one cannot be opened or read.
absl::StatusOr<BlockIndex> IndexBlocks(const std::vector<std::string>& paths, bool csv,
                                       int64_t block_lines);

// One data line of a block read into memory: its text is text[offset, offset + length).
struct BlockLine {
  size_t file = 0;
  int64_t line_no = 0;  // 1-based, in paths[file]
  int64_t row = 0;      // r
  size_t offset = 0;
  size_t length = 0;
};

// Reads block `block` of `index` (its lines in file order, line ends stripped) into *text and
// *lines, replacing what they held. UNAVAILABLE naming the file on an I/O error.
absl::Status ReadBlock(const std::vector<std::string>& paths, bool csv, const BlockIndex& index,
                       int64_t block_lines, int64_t block, std::string* text,
                       std::vector<BlockLine>* lines);

// A permutation of [0, n) drawn by Fisher-Yates from a counter-based hash of `key`: the same
// on every machine and every run.
std::vector<int64_t> SeededPermutation(int64_t n, uint64_t key);

// The key of epoch `epoch`'s block order, and of the order of block `block`'s lines in it.
uint64_t BlockOrderKey(uint64_t seed, int64_t epoch);
uint64_t LineOrderKey(uint64_t seed, int64_t epoch, int64_t block);

// How many of the rows [begin, end) are training rows (r % eval_mod != eval_mod - 1; every
// row when eval_mod is 0).
int64_t TrainingRows(int64_t begin, int64_t end, int64_t eval_mod);

// How many of the split indexes [0, end) go to `partition` of `num_partitions` (j % n == p).
int64_t PartitionShare(int64_t end, int partition, int num_partitions);

}  // namespace ecps

#endif  // ECPS_WORKER_CRITEO_BLOCKS_H_
