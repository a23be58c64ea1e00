// data.epochs and data.shuffle over real Criteo files (tests/data): the passes, their order,
// the partitions dealt per epoch, and Seek into any epoch; and the arithmetic and the block
// index of worker/criteo_blocks.h, against counting by hand.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/criteo_blocks.h"
#include "worker/data.h"

namespace ecps {
namespace {

const std::string kDataDir = ECPS_TEST_DATA_DIR;
constexpr int kSampleRows = 200;  // tests/data/criteo_sample.tsv

ModelSection CriteoModel() {
  ModelSection m;
  m.table_rows.assign(26, 1000);
  return m;
}

DataSection Data(int64_t epochs, bool shuffle, double eval_fraction = 0, int64_t block_lines = 16) {
  DataSection d;
  d.source = DataSourceType::kCriteoTsv;
  d.paths = {kDataDir + "/criteo_sample.tsv"};
  d.eval_fraction = eval_fraction;
  d.epochs = epochs;
  d.shuffle = shuffle;
  d.shuffle_block_lines = block_lines;
  return d;
}

// A sample as text: its label, dense values and row ids, so samples compare as a whole.
using Sample = std::string;

struct Read {
  std::vector<Sample> samples;
  std::vector<int64_t> epochs;  // the epoch() after each sample was read
};

// Reads a partition to its end one sample at a time (so epoch() is each sample's own).
Read ReadAll(DataSource* src) {
  Read out;
  Batch b;
  while (true) {
    auto more = src->Next(1, &b);
    EXPECT_TRUE(more.ok()) << more.status();
    if (!more.ok() || b.size == 0) break;
    Sample s = absl::StrCat(b.labels[0]);
    for (float x : b.dense) absl::StrAppend(&s, ",", x);
    for (int64_t id : b.sparse) absl::StrAppend(&s, ",", id);
    out.samples.push_back(s);
    out.epochs.push_back(src->epoch());
    if (!*more) break;
  }
  return out;
}

std::unique_ptr<DataSource> Open(const DataSection& d, uint64_t seed = 42, int partition = 0,
                                 int partitions = 1, bool eval = false) {
  auto src = MakeDataSource(d, CriteoModel(), seed, partition, partitions, eval);
  EXPECT_TRUE(src.ok()) << src.status();
  return src.ok() ? std::move(*src) : nullptr;
}

std::vector<Sample> Slice(const std::vector<Sample>& v, size_t begin, size_t end) {
  return std::vector<Sample>(v.begin() + begin, v.begin() + end);
}

std::vector<Sample> Sorted(std::vector<Sample> v) {
  std::sort(v.begin(), v.end());
  return v;
}

TEST(Epochs, TwoEpochsInFileOrderReadEverySampleTwiceInTheSameOrder) {
  const Read one = ReadAll(Open(Data(1, false)).get());
  ASSERT_EQ(one.samples.size(), kSampleRows);
  auto two_src = Open(Data(2, false));
  const Read two = ReadAll(two_src.get());
  ASSERT_EQ(two.samples.size(), 2 * kSampleRows) << "two epochs train 2x the samples";
  EXPECT_EQ(two_src->position(), 2 * kSampleRows);
  EXPECT_EQ(Slice(two.samples, 0, kSampleRows), one.samples);
  EXPECT_EQ(Slice(two.samples, kSampleRows, 2 * kSampleRows), one.samples);
  EXPECT_EQ(two.epochs.front(), 0);
  EXPECT_EQ(two.epochs[kSampleRows - 1], 0);
  EXPECT_EQ(two.epochs[kSampleRows], 1);
  EXPECT_EQ(two.epochs.back(), 1);
}

TEST(Epochs, ShuffledEpochsAreDifferentSeededPermutationsOfTheSameSamples) {
  const Read file_order = ReadAll(Open(Data(1, false)).get());
  const Read a = ReadAll(Open(Data(3, true)).get());
  ASSERT_EQ(a.samples.size(), 3 * kSampleRows);
  std::vector<std::vector<Sample>> epoch;
  for (int e = 0; e < 3; ++e) {
    epoch.push_back(Slice(a.samples, e * kSampleRows, (e + 1) * kSampleRows));
    EXPECT_EQ(Sorted(epoch[e]), Sorted(file_order.samples)) << "epoch " << e;
    EXPECT_NE(epoch[e], file_order.samples) << "epoch " << e << " is shuffled";
    EXPECT_EQ(a.epochs[e * kSampleRows], e);
  }
  EXPECT_NE(epoch[0], epoch[1]);
  EXPECT_NE(epoch[1], epoch[2]);
  // The same seed gives the same orders; another seed other ones.
  EXPECT_EQ(ReadAll(Open(Data(3, true)).get()).samples, a.samples);
  EXPECT_NE(Slice(ReadAll(Open(Data(1, true), 43).get()).samples, 0, kSampleRows), epoch[0]);
  // A block larger than the file: one block, its lines shuffled all the same.
  const Read whole = ReadAll(Open(Data(1, true, 0, 1 << 20)).get());
  EXPECT_EQ(Sorted(whole.samples), Sorted(file_order.samples));
  EXPECT_NE(whole.samples, file_order.samples);
}

// Every epoch deals its shuffled order to the partitions: together they hold every training
// sample once, and a worker's share changes from epoch to epoch. The held-out rows never
// enter training, whatever the order.
TEST(Epochs, PartitionsSplitEachShuffledEpochAndHeldOutRowsStayOut) {
  const DataSection d = Data(2, true, 0.1);
  const std::vector<Sample> held_out = ReadAll(Open(d, 42, 0, 1, /*eval=*/true).get()).samples;
  EXPECT_EQ(held_out.size(), kSampleRows / 10);
  const std::vector<Sample> training = ReadAll(Open(Data(1, false, 0.1)).get()).samples;
  const int per_pass = kSampleRows - kSampleRows / 10;
  ASSERT_EQ(training.size(), per_pass);
  std::vector<Read> parts;
  for (int p = 0; p < 3; ++p) parts.push_back(ReadAll(Open(d, 42, p, 3).get()));
  for (int e = 0; e < 2; ++e) {
    std::vector<Sample> all;
    for (int p = 0; p < 3; ++p) {
      const Read& r = parts[p];
      const size_t share = PartitionShare(per_pass, p, 3);
      ASSERT_EQ(r.samples.size(), 2 * share);
      const auto mine = Slice(r.samples, e * share, (e + 1) * share);
      all.insert(all.end(), mine.begin(), mine.end());
    }
    EXPECT_EQ(Sorted(all), Sorted(training)) << "epoch " << e;
  }
  EXPECT_NE(Sorted(Slice(parts[0].samples, 0, 60)), Sorted(Slice(parts[0].samples, 60, 120)))
      << "partition 0 holds other samples in the second epoch";
}

// A reader that resumes at a position (a checkpoint's, a replacement worker's) reads on
// exactly as the reader that got there by reading: in the first epoch, at the boundary, and
// in the second, in file order and shuffled, one partition of two.
TEST(Epochs, SeekLandsOnTheSameSampleInAnyEpoch) {
  for (bool shuffle : {false, true}) {
    const DataSection d = Data(3, shuffle, 0.05);
    const std::vector<Sample> all = ReadAll(Open(d, 42, 1, 2).get()).samples;
    const int64_t per_pass = PartitionShare(kSampleRows - kSampleRows / 20, 1, 2);
    ASSERT_EQ(all.size(), 3 * per_pass);
    for (int64_t at : {int64_t{0}, int64_t{1}, int64_t{37}, per_pass - 1, per_pass, per_pass + 1,
                       per_pass + 50, 2 * per_pass + 3, 3 * per_pass}) {
      auto src = Open(d, 42, 1, 2);
      ASSERT_TRUE(src->Seek(at).ok()) << at;
      EXPECT_EQ(src->position(), at);
      const std::vector<Sample> rest = ReadAll(src.get()).samples;
      EXPECT_EQ(rest, Slice(all, at, all.size())) << "shuffle " << shuffle << ", at " << at;
    }
    auto src = Open(d, 42, 1, 2);
    const absl::Status past = src->Seek(3 * per_pass + 1);
    EXPECT_TRUE(absl::IsOutOfRange(past)) << past;
  }
}

// A malformed line is read in every epoch, but counts against data.max_bad_lines once.
TEST(Epochs, AMalformedLineCountsOnce) {
  const std::string path = ::testing::TempDir() + "/ecps_epochs_bad.tsv";
  {
    std::ifstream in(kDataDir + "/criteo_sample.tsv");
    std::ofstream out(path);
    std::string line;
    for (int i = 0; i < 10 && std::getline(in, line); ++i) out << line << "\n";
    out << "0\tmalformed\n";
  }
  for (bool shuffle : {false, true}) {
    DataSection d = Data(4, shuffle);
    d.paths = {path};
    d.max_bad_lines = 1;
    auto src = Open(d);
    const Read r = ReadAll(src.get());
    EXPECT_EQ(r.samples.size(), 40);
    EXPECT_EQ(src->bad_lines(), 1) << "shuffle " << shuffle;
  }
  std::remove(path.c_str());
}

TEST(CriteoBlocks, ArithmeticMatchesCounting) {
  for (int64_t m : {0, 1, 3, 20}) {
    for (int64_t begin = 0; begin < 50; begin += 7) {
      for (int64_t end = begin; end < 80; end += 5) {
        int64_t training = 0;
        for (int64_t r = begin; r < end; ++r) training += !(m > 0 && r % m == m - 1);
        EXPECT_EQ(TrainingRows(begin, end, m), training) << begin << " " << end << " " << m;
      }
    }
  }
  for (int n : {1, 2, 5}) {
    for (int p = 0; p < n; ++p) {
      for (int64_t end = 0; end < 30; ++end) {
        int64_t share = 0;
        for (int64_t j = 0; j < end; ++j) share += j % n == p;
        EXPECT_EQ(PartitionShare(end, p, n), share) << end << " " << p << " " << n;
      }
    }
  }
  const std::vector<int64_t> perm = SeededPermutation(100, 7);
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 100; ++i) EXPECT_EQ(sorted[i], i);
  EXPECT_EQ(SeededPermutation(100, 7), perm);
  EXPECT_NE(SeededPermutation(100, 8), perm);
}

// Blocks run across files and past a CSV header: every data line is in one block, in order,
// with its own file and line number.
TEST(CriteoBlocks, IndexAndReadAcrossFilesWithHeaders) {
  const std::string csv = kDataDir + "/criteo_sample.txt";  // a header and 200 rows
  const std::vector<std::string> paths = {csv, csv};
  auto index = IndexBlocks(paths, /*csv=*/true, 64);
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->data_lines, 400);
  ASSERT_EQ(index->starts.size(), 7);  // 6 x 64 + 16
  std::string text;
  std::vector<BlockLine> lines;
  int64_t row = 0;
  for (int64_t b = 0; b < 7; ++b) {
    ASSERT_TRUE(ReadBlock(paths, true, *index, 64, b, &text, &lines).ok());
    ASSERT_EQ(lines.size(), b < 6 ? 64u : 16u);
    for (const BlockLine& l : lines) {
      EXPECT_EQ(l.row, row);
      EXPECT_EQ(l.file, row < 200 ? 0u : 1u);
      EXPECT_EQ(l.line_no, row % 200 + 2) << "line 1 of each file is its header";
      ++row;
    }
  }
  // Block 3 holds rows 192..255: the last 8 of the first file, the first 56 of the second.
  ASSERT_TRUE(ReadBlock(paths, true, *index, 64, 3, &text, &lines).ok());
  EXPECT_EQ(text.substr(lines[8].offset, 2), "0,") << "the first data line of file 2";
}

}  // namespace
}  // namespace ecps
