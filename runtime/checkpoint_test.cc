#include "runtime/checkpoint.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ecps {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A deterministic, irregular payload for (table, row): every byte depends on both.
std::vector<float> Payload(int table, int64_t row, int payload_floats) {
  std::vector<float> p(payload_floats);
  uint64_t x = (static_cast<uint64_t>(table) << 40) ^ static_cast<uint64_t>(row) * 0x9E37ULL;
  for (int k = 0; k < payload_floats; ++k) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    p[k] = static_cast<float>(static_cast<int64_t>(x >> 33) % 20001 - 10000) / 1000.0f;
  }
  return p;
}

std::vector<float> Payloads(int table, const std::vector<int64_t>& rows, int payload_floats) {
  std::vector<float> out;
  out.reserve(rows.size() * payload_floats);
  for (int64_t r : rows) {
    std::vector<float> p = Payload(table, r, payload_floats);
    out.insert(out.end(), p.begin(), p.end());
  }
  return out;
}

std::vector<float> DenseValues(int tensor, int64_t n, float scale) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = scale * (tensor + 1) + 0.25f * static_cast<float>(i);
  return v;
}

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

void FlipByte(const std::string& path, int64_t offset) {
  int fd = ::open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << path;
  unsigned char b;
  ASSERT_EQ(::pread(fd, &b, 1, offset), 1);
  b ^= 0x10;
  ASSERT_EQ(::pwrite(fd, &b, 1, offset), 1);
  ::close(fd);
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::path(::testing::TempDir()) / "ckpt-test-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  static CheckpointLayout SmallLayout(int64_t step) {
    CheckpointLayout l;
    l.job = "test \"job\"\n";  // exercises JSON escaping
    l.step = step;
    l.dim = 4;
    l.payload_floats = 8;  // adagrad: weights + accumulator
    l.sparse_optimizer = "adagrad";
    l.dense_optimizer = "adam";
    l.table_rows = {1000, 37, 5};
    l.dense_sizes = {10, 3};
    l.dense_state_floats = {20, 6};
    return l;
  }

  // Writes every table as `servers` strided writers (row r belongs to server r % servers)
  // and every dense tensor, commits, and returns the committed directory.
  std::string WriteCheckpoint(const CheckpointLayout& l, int servers = 2,
                              std::vector<int64_t> readers = {100, 250, 0}) {
    absl::StatusOr<std::string> tmp = BeginCheckpoint(root_, l);
    EXPECT_TRUE(tmp.ok()) << tmp.status();
    if (!tmp.ok()) return "";
    std::vector<uint64_t> checksums;
    for (size_t t = 0; t < l.table_rows.size(); ++t) {
      std::vector<uint64_t> partials;
      for (int s = 0; s < servers; ++s) {
        auto writer = TableWriter::Open(*tmp, t, l.table_rows[t], l.payload_floats);
        EXPECT_TRUE(writer.ok()) << writer.status();
        std::vector<int64_t> rows;
        for (int64_t r = s; r < l.table_rows[t]; r += servers) rows.push_back(r);
        std::vector<float> payloads = Payloads(t, rows, l.payload_floats);
        EXPECT_TRUE((*writer)->WriteRows(rows.data(), payloads.data(), rows.size()).ok());
        EXPECT_TRUE((*writer)->Finish().ok());
        partials.push_back((*writer)->checksum());
      }
      checksums.push_back(CombineChecksums(partials));
    }
    std::vector<DenseEntry> dense;
    for (size_t d = 0; d < l.dense_sizes.size(); ++d) {
      auto entry = WriteDense(*tmp, d, l.step + d, DenseValues(d, l.dense_sizes[d], 1.0f),
                              DenseValues(d, l.dense_state_floats[d], -2.0f));
      EXPECT_TRUE(entry.ok()) << entry.status();
      dense.push_back(*entry);
    }
    std::string final_dir;
    absl::Status st = CommitCheckpoint(*tmp, l, checksums, dense, readers, &final_dir);
    EXPECT_TRUE(st.ok()) << st;
    return final_dir;
  }

  std::string root_;
};

// ---- Checksums -----------------------------------------------------------------------------

TEST(Hash64Test, MatchesReferenceXxh64) {
  // Reference values from libxxhash (XXH64).
  EXPECT_EQ(Hash64("", 0, 0), 0xEF46DB3751D8E999ULL);
  EXPECT_EQ(Hash64("a", 1, 0), 0xD24EC4F1A98C6E5BULL);
  EXPECT_EQ(Hash64("abc", 3, 0), 0x44BC2CF5AD770999ULL);
  EXPECT_EQ(Hash64("abc", 3, 1234), 0x2151859F42F363E2ULL);
  const char* text = "Nobody inspects the spammish repetition";
  EXPECT_EQ(Hash64(text, std::strlen(text), 0), 0xFBCEA83C8A378BF1ULL);
  unsigned char bytes[100];
  std::iota(bytes, bytes + 100, 0);
  EXPECT_EQ(Hash64(bytes, 100, 0), 0x6AC1E58032166597ULL);
  EXPECT_EQ(Hash64(bytes, 100, 0x9E3779B97F4A7C15ULL), 0x3B97D91EBA03E785ULL);
}

TEST(RowChecksumTest, DependsOnRowIdAndEveryByte) {
  std::vector<float> p = Payload(0, 7, 8);
  uint64_t base = RowChecksum(7, p.data(), 8);
  EXPECT_NE(base, RowChecksum(8, p.data(), 8));  // same bytes, other row
  for (size_t byte = 0; byte < p.size() * 4; ++byte) {
    std::vector<float> q = p;
    reinterpret_cast<unsigned char*>(q.data())[byte] ^= 1;
    EXPECT_NE(base, RowChecksum(7, q.data(), 8)) << byte;
  }
  // Identical payloads in two rows do not cancel out under XOR.
  std::vector<float> zeros(8, 0.0f);
  EXPECT_NE(RowChecksum(1, zeros.data(), 8) ^ RowChecksum(2, zeros.data(), 8), 0u);
}

TEST_F(CheckpointTest, ChecksumIsIndependentOfWritersAndOrder) {
  CheckpointLayout l = SmallLayout(1);
  l.table_rows = {500};
  const int pf = l.payload_floats;
  uint64_t whole = 0;
  for (int64_t r = 0; r < 500; ++r) whole ^= RowChecksum(r, Payload(0, r, pf).data(), pf);

  absl::StatusOr<std::string> tmp = BeginCheckpoint(root_, l);
  ASSERT_TRUE(tmp.ok()) << tmp.status();
  std::mt19937_64 rng(1);
  for (int writers : {1, 2, 3, 7}) {
    // Random partition of the rows over `writers`, each writing in shuffled, batched order.
    std::vector<int64_t> all(500);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    std::vector<std::vector<int64_t>> parts(writers);
    for (int64_t r : all) parts[rng() % writers].push_back(r);
    std::vector<uint64_t> partials;
    for (int w = writers - 1; w >= 0; --w) {
      auto writer = TableWriter::Open(*tmp, 0, 500, pf);
      ASSERT_TRUE(writer.ok()) << writer.status();
      std::vector<float> payloads = Payloads(0, parts[w], pf);
      for (size_t i = 0; i < parts[w].size(); i += 17) {
        int64_t n = std::min<int64_t>(17, parts[w].size() - i);
        ASSERT_TRUE((*writer)->WriteRows(parts[w].data() + i, payloads.data() + i * pf, n).ok());
      }
      EXPECT_EQ((*writer)->rows_written(), static_cast<int64_t>(parts[w].size()));
      partials.push_back((*writer)->checksum());
    }
    std::shuffle(partials.begin(), partials.end(), rng);
    EXPECT_EQ(CombineChecksums(partials), whole) << writers << " writers";
  }

  // Different data gives a different checksum: a changed value, swapped rows, a row missing,
  // a row written twice.
  auto table_checksum = [&](const std::vector<int64_t>& rows, const std::vector<float>& data) {
    uint64_t c = 0;
    for (size_t i = 0; i < rows.size(); ++i) c ^= RowChecksum(rows[i], data.data() + i * pf, pf);
    return c;
  };
  std::vector<int64_t> rows(500);
  std::iota(rows.begin(), rows.end(), 0);
  std::vector<float> data = Payloads(0, rows, pf);
  ASSERT_EQ(table_checksum(rows, data), whole);
  std::vector<float> changed = data;
  changed[123 * pf + 3] += 1e-3f;
  EXPECT_NE(table_checksum(rows, changed), whole);
  std::vector<float> swapped = data;
  std::swap_ranges(swapped.begin() + 10 * pf, swapped.begin() + 11 * pf, swapped.begin() + 20 * pf);
  EXPECT_NE(table_checksum(rows, swapped), whole);
  std::vector<int64_t> missing(rows.begin(), rows.end() - 1);
  EXPECT_NE(table_checksum(missing, data), whole);
  std::vector<int64_t> twice = rows;
  twice.push_back(4);
  std::vector<float> twice_data = data;
  twice_data.insert(twice_data.end(), data.begin() + 4 * pf, data.begin() + 5 * pf);
  EXPECT_NE(table_checksum(twice, twice_data), whole);
}

// ---- Round trip ----------------------------------------------------------------------------

TEST_F(CheckpointTest, RoundTripWithTwoStridedWriters) {
  CheckpointLayout l = SmallLayout(1234);
  std::string dir = WriteCheckpoint(l);
  EXPECT_EQ(dir, (fs::path(root_) / "step-000001234").string());
  EXPECT_FALSE(fs::exists(dir + ".tmp"));

  absl::StatusOr<std::string> latest = LatestCheckpoint(root_);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, dir);
  absl::Status verified = VerifyCheckpoint(dir);
  ASSERT_TRUE(verified.ok()) << verified;

  absl::StatusOr<Manifest> m = ReadManifest(dir);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->layout, l);
  EXPECT_EQ(m->format_version, kCheckpointFormatVersion);
  EXPECT_FALSE(m->created.empty());
  EXPECT_THAT(m->reader_positions, ElementsAre(100, 250, 0));
  ASSERT_EQ(m->dense.size(), 2u);
  EXPECT_EQ(m->dense[0].version, 1234);
  EXPECT_EQ(m->dense[1].version, 1235);
  ASSERT_EQ(m->table_checksums.size(), 3u);
  for (int t = 0; t < 3; ++t) {
    uint64_t whole = 0;
    for (int64_t r = 0; r < l.table_rows[t]; ++r) {
      whole ^= RowChecksum(r, Payload(t, r, l.payload_floats).data(), l.payload_floats);
    }
    EXPECT_EQ(m->table_checksums[t], whole) << t;
  }

  // Every row, read back in order, byte-identical; the file itself is in logical order.
  for (int t = 0; t < 3; ++t) {
    auto reader = TableReader::Open(*m, t);
    ASSERT_TRUE(reader.ok()) << reader.status();
    std::vector<int64_t> rows(l.table_rows[t]);
    std::iota(rows.begin(), rows.end(), 0);
    std::vector<float> out(rows.size() * l.payload_floats, -1.0f);
    ASSERT_TRUE((*reader)->ReadRows(rows.data(), rows.size(), out.data()).ok());
    std::vector<float> expected = Payloads(t, rows, l.payload_floats);
    EXPECT_EQ(std::memcmp(out.data(), expected.data(), out.size() * 4), 0) << t;
    std::string raw = ReadText((fs::path(dir) / TableFileName(t)).string());
    ASSERT_EQ(raw.size(), expected.size() * 4);
    EXPECT_EQ(std::memcmp(raw.data(), expected.data(), raw.size()), 0) << t;
  }

  for (int d = 0; d < 2; ++d) {
    std::vector<float> weights, state;
    int64_t version = -1;
    absl::Status st = ReadDense(*m, d, &weights, &state, &version);
    ASSERT_TRUE(st.ok()) << st;
    EXPECT_EQ(weights, DenseValues(d, l.dense_sizes[d], 1.0f));
    EXPECT_EQ(state, DenseValues(d, l.dense_state_floats[d], -2.0f));
    EXPECT_EQ(version, 1234 + d);
    // The dense checksum is plain XXH64 of the whole file (xxhsum -H64 prints it too).
    std::string raw = ReadText((fs::path(dir) / DenseFileName(d)).string());
    ASSERT_EQ(static_cast<int64_t>(raw.size()), DenseFileBytes(l, d));
    EXPECT_EQ(m->dense[d].checksum, Hash64(raw.data(), raw.size(), 0));
  }
}

TEST_F(CheckpointTest, WritersInSeparateProcessesWriteOneFileAtOnce) {
  CheckpointLayout l = SmallLayout(21);
  l.table_rows = {30000};
  l.dense_sizes = {};
  l.dense_state_floats = {};
  const int pf = l.payload_floats;
  constexpr int kServers = 3;
  absl::StatusOr<std::string> tmp = BeginCheckpoint(root_, l);
  ASSERT_TRUE(tmp.ok()) << tmp.status();
  std::vector<int> pipes;
  std::vector<pid_t> children;
  for (int s = 0; s < kServers; ++s) {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {  // a server: rows r % kServers == s, in batches of 1000 ids
      ::close(fds[0]);
      auto writer = TableWriter::Open(*tmp, 0, 30000, pf);
      if (!writer.ok()) ::_exit(1);
      std::vector<int64_t> rows;
      for (int64_t r = s; r < 30000; r += kServers) rows.push_back(r);
      std::vector<float> payloads = Payloads(0, rows, pf);
      for (size_t i = 0; i < rows.size(); i += 1000) {
        int64_t n = std::min<int64_t>(1000, rows.size() - i);
        if (!(*writer)->WriteRows(rows.data() + i, payloads.data() + i * pf, n).ok()) ::_exit(2);
      }
      if (!(*writer)->Finish().ok()) ::_exit(3);
      uint64_t c = (*writer)->checksum();
      ::_exit(::write(fds[1], &c, sizeof(c)) == sizeof(c) ? 0 : 4);
    }
    ::close(fds[1]);
    pipes.push_back(fds[0]);
    children.push_back(pid);
  }
  std::vector<uint64_t> partials;
  for (int s = 0; s < kServers; ++s) {
    int status = 0;
    ASSERT_EQ(::waitpid(children[s], &status, 0), children[s]);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "server " << s;
    uint64_t c = 0;
    ASSERT_EQ(::read(pipes[s], &c, sizeof(c)), static_cast<ssize_t>(sizeof(c)));
    ::close(pipes[s]);
    partials.push_back(c);
  }
  std::string dir;
  ASSERT_TRUE(CommitCheckpoint(*tmp, l, {CombineChecksums(partials)}, {}, {7, 8, 9}, &dir).ok());
  absl::Status verified = VerifyCheckpoint(dir);
  ASSERT_TRUE(verified.ok()) << verified;
  std::vector<int64_t> rows(30000);
  std::iota(rows.begin(), rows.end(), 0);
  std::string raw = ReadText((fs::path(dir) / "table-000.rows").string());
  std::vector<float> expected = Payloads(0, rows, pf);
  ASSERT_EQ(raw.size(), expected.size() * 4);
  EXPECT_EQ(std::memcmp(raw.data(), expected.data(), raw.size()), 0);

  // A writer that skipped a row, or wrote one twice, fails verification of the whole table.
  l.step = 22;
  for (int64_t extra : {int64_t{-1}, int64_t{5}}) {
    absl::StatusOr<std::string> tmp2 = BeginCheckpoint(root_, l);
    ASSERT_TRUE(tmp2.ok());
    auto writer = TableWriter::Open(*tmp2, 0, 30000, pf);
    ASSERT_TRUE(writer.ok());
    std::vector<int64_t> ids = rows;
    if (extra < 0) ids.pop_back();  // row 29999 never written
    if (extra >= 0) ids.push_back(extra);
    std::vector<float> payloads = Payloads(0, ids, pf);
    ASSERT_TRUE((*writer)->WriteRows(ids.data(), payloads.data(), ids.size()).ok());
    ASSERT_TRUE((*writer)->Finish().ok());
    std::string bad_dir;
    ASSERT_TRUE(CommitCheckpoint(*tmp2, l, {(*writer)->checksum()}, {}, {}, &bad_dir).ok());
    absl::Status st = VerifyCheckpoint(bad_dir);
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << extra;
    EXPECT_THAT(Msg(st), HasSubstr("table-000.rows")) << extra;
    fs::remove_all(bad_dir);
  }
}

TEST_F(CheckpointTest, ReshardingReaderReadsAnyRowsInAnyOrder) {
  // One table big enough that merged reads hit the span limit; written in consecutive
  // batches by one writer.
  CheckpointLayout l = SmallLayout(3);
  l.table_rows = {200000};
  l.dense_sizes = {};
  l.dense_state_floats = {};
  const int pf = l.payload_floats;
  absl::StatusOr<std::string> tmp = BeginCheckpoint(root_, l);
  ASSERT_TRUE(tmp.ok()) << tmp.status();
  auto writer = TableWriter::Open(*tmp, 0, 200000, pf);
  ASSERT_TRUE(writer.ok()) << writer.status();
  for (int64_t start = 0; start < 200000; start += 50000) {
    std::vector<int64_t> rows(50000);
    std::iota(rows.begin(), rows.end(), start);
    std::vector<float> payloads = Payloads(0, rows, pf);
    ASSERT_TRUE((*writer)->WriteRows(rows.data(), payloads.data(), rows.size()).ok());
  }
  ASSERT_TRUE((*writer)->Finish().ok());
  std::string dir;
  ASSERT_TRUE(CommitCheckpoint(*tmp, l, {(*writer)->checksum()}, {}, {}, &dir).ok());
  ASSERT_TRUE(VerifyCheckpoint(dir).ok());
  absl::StatusOr<Manifest> m = ReadManifest(dir);
  ASSERT_TRUE(m.ok()) << m.status();
  auto reader = TableReader::Open(*m, 0);
  ASSERT_TRUE(reader.ok()) << reader.status();

  std::mt19937_64 rng(7);
  std::vector<std::vector<int64_t>> patterns;
  for (int64_t stride : {3, 5, 300, 1000}) {  // small gaps merge; large ones do not
    std::vector<int64_t> rows;
    for (int64_t r = stride / 2; r < 200000; r += stride) rows.push_back(r);
    patterns.push_back(rows);
  }
  std::vector<int64_t> shuffled;  // random order with repeats
  for (int i = 0; i < 5000; ++i) shuffled.push_back(rng() % 200000);
  patterns.push_back(shuffled);
  std::vector<int64_t> descending;
  for (int64_t r = 199999; r >= 0; r -= 7) descending.push_back(r);
  patterns.push_back(descending);
  patterns.push_back({199999, 0, 1, 2, 4, 8, 100000, 100001, 199998});
  for (size_t p = 0; p < patterns.size(); ++p) {
    const std::vector<int64_t>& rows = patterns[p];
    std::vector<float> out(rows.size() * pf, -1.0f);
    absl::Status st = (*reader)->ReadRows(rows.data(), rows.size(), out.data());
    ASSERT_TRUE(st.ok()) << st;
    std::vector<float> expected = Payloads(0, rows, pf);
    EXPECT_EQ(std::memcmp(out.data(), expected.data(), out.size() * 4), 0) << "pattern " << p;
  }
  int64_t bad[] = {5, 200000};
  float sink[16];
  absl::Status st = (*reader)->ReadRows(bad, 2, sink);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Msg(st), HasSubstr("table-000.rows"));
}

TEST_F(CheckpointTest, WriterRefusesRowsOutOfRangeAndWrongFiles) {
  CheckpointLayout l = SmallLayout(4);
  absl::StatusOr<std::string> tmp = BeginCheckpoint(root_, l);
  ASSERT_TRUE(tmp.ok()) << tmp.status();
  auto writer = TableWriter::Open(*tmp, 1, 37, l.payload_floats);
  ASSERT_TRUE(writer.ok());
  int64_t rows[] = {0, 37};
  std::vector<float> payloads(2 * l.payload_floats, 1.0f);
  EXPECT_EQ((*writer)->WriteRows(rows, payloads.data(), 2).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*writer)->rows_written(), 0);
  EXPECT_EQ((*writer)->checksum(), 0u);
  // Wrong row count for the pre-sized file, and a table that BeginCheckpoint did not create.
  auto wrong = TableWriter::Open(*tmp, 1, 38, l.payload_floats);
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Msg(wrong.status()), HasSubstr("table-001.rows"));
  auto absent = TableWriter::Open(*tmp, 9, 10, l.payload_floats);
  EXPECT_EQ(absent.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Msg(absent.status()), HasSubstr("table-009.rows"));
}

// ---- Atomicity -----------------------------------------------------------------------------

TEST_F(CheckpointTest, UncommittedCheckpointsAreIgnoredAndNewestWins) {
  EXPECT_EQ(LatestCheckpoint(root_ + "/absent").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(LatestCheckpoint(root_).status().code(), absl::StatusCode::kNotFound);

  std::string five = WriteCheckpoint(SmallLayout(5));
  // An uncommitted step 9 (writers done, no commit) and a step-directory without a manifest.
  ASSERT_TRUE(BeginCheckpoint(root_, SmallLayout(9)).ok());
  fs::create_directory(fs::path(root_) / "step-000000012");
  fs::create_directory(fs::path(root_) / "step-00000001x");
  absl::StatusOr<std::string> latest = LatestCheckpoint(root_);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, five);

  std::string seven = WriteCheckpoint(SmallLayout(7));
  EXPECT_EQ(*LatestCheckpoint(root_), seven);
  // Step 9 again: BeginCheckpoint discards the leftover step-9.tmp.
  std::string nine = WriteCheckpoint(SmallLayout(9));
  EXPECT_EQ(*LatestCheckpoint(root_), nine);
  EXPECT_TRUE(VerifyCheckpoint(nine).ok());
  // Steps compare as numbers, not names (10 digits vs 9).
  std::string big = WriteCheckpoint(SmallLayout(1000000000));
  EXPECT_EQ(*LatestCheckpoint(root_), big);
  absl::StatusOr<std::vector<std::string>> all = ListCheckpoints(root_);
  ASSERT_TRUE(all.ok());
  EXPECT_THAT(*all, ElementsAre(big, nine, seven, five));

  // A committed step is never overwritten.
  EXPECT_EQ(BeginCheckpoint(root_, SmallLayout(7)).status().code(),
            absl::StatusCode::kAlreadyExists);
}

TEST_F(CheckpointTest, FailedCommitPublishesNothing) {
  CheckpointLayout l = SmallLayout(2);
  absl::StatusOr<std::string> tmp = BeginCheckpoint(root_, l);
  ASSERT_TRUE(tmp.ok());
  // Dense tensor 1 was never written.
  auto d0 = WriteDense(*tmp, 0, 1, DenseValues(0, 10, 1.0f), DenseValues(0, 20, 1.0f));
  ASSERT_TRUE(d0.ok());
  absl::Status st = CommitCheckpoint(*tmp, l, {0, 0, 0}, {*d0, *d0}, {}, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Msg(st), HasSubstr("dense-001.bin"));
  EXPECT_EQ(LatestCheckpoint(root_).status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(fs::exists(fs::path(root_) / "step-000000002"));
  // Wrong counts are refused before anything is touched.
  EXPECT_EQ(CommitCheckpoint(*tmp, l, {0, 0}, {*d0, *d0}, {}, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

// ---- Pruning -------------------------------------------------------------------------------

// After each of N saves the save prunes with keep = 3: only the newest 3 remain, and the
// newest loads (verified, every row and tensor read back).
TEST_F(CheckpointTest, PruningKeepsTheNewestAndTheNewestLoads) {
  std::vector<std::string> written;
  for (int64_t step : {10, 20, 30, 40, 50, 60}) {
    written.push_back(WriteCheckpoint(SmallLayout(step)));
    absl::StatusOr<std::vector<std::string>> removed = PruneCheckpoints(root_, 3, step);
    ASSERT_TRUE(removed.ok()) << removed.status();
    if (written.size() <= 3) {
      EXPECT_TRUE(removed->empty()) << step;
    } else {
      EXPECT_THAT(*removed, ElementsAre(written[written.size() - 4])) << step;
    }
  }
  absl::StatusOr<std::vector<std::string>> left = ListCheckpoints(root_);
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_THAT(*left, ElementsAre(written[5], written[4], written[3]));
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(fs::exists(written[i])) << written[i];

  absl::StatusOr<std::string> latest = LatestCheckpoint(root_);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, written[5]);
  absl::Status verified = VerifyCheckpoint(*latest);
  ASSERT_TRUE(verified.ok()) << verified;
  absl::StatusOr<Manifest> m = ReadManifest(*latest);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->layout, SmallLayout(60));
  for (int t = 0; t < 3; ++t) {
    auto reader = TableReader::Open(*m, t);
    ASSERT_TRUE(reader.ok()) << reader.status();
    std::vector<int64_t> rows(m->layout.table_rows[t]);
    std::iota(rows.begin(), rows.end(), 0);
    std::vector<float> out(rows.size() * m->layout.payload_floats);
    ASSERT_TRUE((*reader)->ReadRows(rows.data(), rows.size(), out.data()).ok());
    std::vector<float> expected = Payloads(t, rows, m->layout.payload_floats);
    EXPECT_EQ(std::memcmp(out.data(), expected.data(), out.size() * 4), 0) << t;
  }
  for (int d = 0; d < 2; ++d) {
    std::vector<float> weights, state;
    int64_t version = -1;
    ASSERT_TRUE(ReadDense(*m, d, &weights, &state, &version).ok()) << d;
    EXPECT_EQ(version, 60 + d);
  }

  // keep = 1 leaves only the newest; pruning again changes nothing.
  absl::StatusOr<std::vector<std::string>> removed = PruneCheckpoints(root_, 1, 60);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_THAT(*removed, ElementsAre(written[3], written[4]));
  EXPECT_THAT(*ListCheckpoints(root_), ElementsAre(written[5]));
  removed = PruneCheckpoints(root_, 1, 60);
  ASSERT_TRUE(removed.ok());
  EXPECT_TRUE(removed->empty());
}

// The one just written stays even when it is not among the newest (a job run again into a
// directory holding higher steps); leftovers below the newest committed step go; anything
// else, and leftovers at or above it, stay.
TEST_F(CheckpointTest, PruningKeepsTheOneJustWrittenAndRemovesOnlyLeftovers) {
  const std::string old = WriteCheckpoint(SmallLayout(100));
  const std::string s200 = WriteCheckpoint(SmallLayout(200));
  const std::string s300 = WriteCheckpoint(SmallLayout(300));
  // A crashed save of step 150, a directory an interrupted prune left (no manifest), a crashed
  // save above the newest, and entries that are not checkpoints at all.
  ASSERT_TRUE(BeginCheckpoint(root_, SmallLayout(150)).ok());
  const fs::path unpublished = fs::path(root_) / "step-000000050";
  fs::create_directory(unpublished);
  std::ofstream(unpublished / "table-000.rows") << "x";
  ASSERT_TRUE(BeginCheckpoint(root_, SmallLayout(400)).ok());
  fs::create_directory(fs::path(root_) / "step-00000001x");
  fs::create_directory(fs::path(root_) / "notes");
  std::ofstream(fs::path(root_) / "step-000000010") << "a file, not a directory";

  const std::string again = WriteCheckpoint(SmallLayout(20));  // the job run again
  absl::StatusOr<std::vector<std::string>> removed = PruneCheckpoints(root_, 2, 20);
  ASSERT_TRUE(removed.ok()) << removed.status();
  // Oldest first; 200 is beyond keep = 2 (20, the one just written, and 300, the newest).
  EXPECT_THAT(*removed, ElementsAre(unpublished.string(), old,
                                    (fs::path(root_) / "step-000000150.tmp").string(), s200));
  EXPECT_THAT(*ListCheckpoints(root_), ElementsAre(s300, again));
  EXPECT_TRUE(fs::exists(fs::path(root_) / "step-000000400.tmp"));
  EXPECT_TRUE(fs::exists(fs::path(root_) / "step-00000001x"));
  EXPECT_TRUE(fs::exists(fs::path(root_) / "notes"));
  EXPECT_TRUE(fs::is_regular_file(fs::path(root_) / "step-000000010"));
  EXPECT_TRUE(VerifyCheckpoint(again).ok());
}

TEST_F(CheckpointTest, PruningRefusesKeepBelowOneAndIgnoresAnAbsentRoot) {
  const std::string dir = WriteCheckpoint(SmallLayout(1));
  absl::StatusOr<std::vector<std::string>> refused = PruneCheckpoints(root_, 0);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Msg(refused.status()), HasSubstr("keep is 0"));
  EXPECT_TRUE(fs::exists(dir));
  absl::StatusOr<std::vector<std::string>> absent = PruneCheckpoints(root_ + "/absent", 1);
  ASSERT_TRUE(absent.ok()) << absent.status();
  EXPECT_TRUE(absent->empty());
}

// ---- Refusals ------------------------------------------------------------------------------

TEST_F(CheckpointTest, TruncatedTableFileIsRefused) {
  std::string dir = WriteCheckpoint(SmallLayout(11));
  std::string file = (fs::path(dir) / "table-001.rows").string();
  fs::resize_file(file, 37 * 8 * 4 - 4);
  absl::Status st = VerifyCheckpoint(dir);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Msg(st), HasSubstr(file));
  EXPECT_THAT(Msg(st), HasSubstr("truncated"));
  absl::StatusOr<Manifest> m = ReadManifest(dir);
  ASSERT_TRUE(m.ok());
  auto reader = TableReader::Open(*m, 1);
  EXPECT_EQ(reader.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Msg(reader.status()), HasSubstr(file));
  EXPECT_TRUE(TableReader::Open(*m, 0).ok());  // the other tables stay readable
}

TEST_F(CheckpointTest, FlippedByteInTableFileIsRefused) {
  std::string dir = WriteCheckpoint(SmallLayout(12));
  std::string file = (fs::path(dir) / "table-000.rows").string();
  FlipByte(file, 517 * 8 * 4 + 5);
  absl::Status st = VerifyCheckpoint(dir);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Msg(st), HasSubstr(file));
  EXPECT_THAT(Msg(st), HasSubstr("checksum mismatch"));
}

TEST_F(CheckpointTest, FlippedByteInDenseFileIsRefused) {
  std::string dir = WriteCheckpoint(SmallLayout(13));
  std::string file = (fs::path(dir) / "dense-001.bin").string();
  for (int64_t offset : {kDenseHeaderBytes + 5, int64_t{17}}) {  // in the weights, the header
    FlipByte(file, offset);
    absl::Status st = VerifyCheckpoint(dir);
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(Msg(st), HasSubstr(file));
    absl::StatusOr<Manifest> m = ReadManifest(dir);
    ASSERT_TRUE(m.ok());
    std::vector<float> w, s;
    int64_t version;
    st = ReadDense(*m, 1, &w, &s, &version);
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(Msg(st), HasSubstr(file));
    EXPECT_TRUE(ReadDense(*m, 0, &w, &s, &version).ok());
    FlipByte(file, offset);  // restore
    EXPECT_TRUE(VerifyCheckpoint(dir).ok());
  }
}

TEST_F(CheckpointTest, MissingManifestIsRefused) {
  std::string dir = WriteCheckpoint(SmallLayout(14));
  std::string file = (fs::path(dir) / "MANIFEST.json").string();
  fs::remove(file);
  absl::StatusOr<Manifest> m = ReadManifest(dir);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Msg(m.status()), file + ": missing");
  EXPECT_EQ(VerifyCheckpoint(dir).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(LatestCheckpoint(root_).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(CheckpointTest, MalformedManifestsAreRefusedNamingTheFile) {
  std::string dir = WriteCheckpoint(SmallLayout(15));
  std::string file = (fs::path(dir) / "MANIFEST.json").string();
  const std::string good = ReadText(file);
  ASSERT_TRUE(ReadManifest(dir).ok());
  ASSERT_THAT(good, HasSubstr("\"rows\": 37, \"bytes\": 1184,"));

  struct Case {
    std::string name, from, to, why;
  };
  std::vector<Case> cases = {
      {"truncated", "", "", "unexpected end"},
      {"trailing text", "\n}\n", "\n}\n}", "after the top-level value"},
      {"unknown field", "\"step\": 15,", "\"step\": 15, \"colour\": 1,", "unknown field colour"},
      {"missing field", "\"embedding_dim\": 4,", "", "missing field embedding_dim"},
      {"wrong type", "\"step\": 15,", "\"step\": \"15\",", "step must be an integer"},
      {"float", "\"step\": 15,", "\"step\": 15.0,", "integers"},
      {"duplicate", "\"step\": 15,", "\"step\": 15, \"step\": 15,", "duplicate field"},
      {"bad checksum", "\"checksum\": \"", "\"checksum\": \"x", "hex digits"},
      {"unknown table field", "\"rows\": 37,", "\"rows\": 37, \"x\": 0,", "tables[1].x"},
      {"path escape", "\"table-002.rows\"", "\"../table-002.rows\"", "tables[2].file"},
      {"bytes disagree", "\"bytes\": 1184", "\"bytes\": 1180", "tables[1].bytes is 1180"},
      {"rows disagree", "\"rows\": 37,", "\"rows\": 38,", "tables[1].bytes is 1184"},
      {"dense bytes", "\"state_floats\": 6,", "\"state_floats\": 7,", "dense[1].bytes"},
      {"payload below dim", "\"payload_floats\": 8", "\"payload_floats\": 2", "payload_floats"},
      {"negative reader", "\"reader_positions\": [100", "\"reader_positions\": [-1",
       "reader_positions[0]"},
      {"not an object", good, "[1, 2]", "must be an object"},
      {"other format", "\"ecps-checkpoint\"", "\"other\"", "format is \"other\""},
  };
  for (const Case& c : cases) {
    std::string text = c.name == "truncated" ? good.substr(0, good.find("\"tables\": [") + 11)
                                             : absl::StrReplaceAll(good, {{c.from, c.to}});
    if (c.name != "truncated") {
      ASSERT_NE(text, good) << c.name;
    }
    WriteText(file, text);
    absl::StatusOr<Manifest> m = ReadManifest(dir);
    EXPECT_EQ(m.status().code(), absl::StatusCode::kDataLoss) << c.name << ": " << m.status();
    EXPECT_THAT(Msg(m.status()), HasSubstr(file + ": not valid: ")) << c.name;
    EXPECT_THAT(Msg(m.status()), HasSubstr(c.why)) << c.name;
    EXPECT_EQ(VerifyCheckpoint(dir).code(), absl::StatusCode::kDataLoss) << c.name;
  }

  // A newer format version is refused as such, not as a schema error.
  WriteText(file, absl::StrReplaceAll(
                      good, {{"\"format_version\": 1,", "\"format_version\": 2, \"new\": 1,"}}));
  absl::StatusOr<Manifest> m = ReadManifest(dir);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Msg(m.status()), HasSubstr(file));
  EXPECT_THAT(Msg(m.status()), HasSubstr("format_version 2"));

  WriteText(file, good);
  EXPECT_TRUE(VerifyCheckpoint(dir).ok());
}

TEST_F(CheckpointTest, ManifestSizesThatDisagreeWithTheFilesOrModelAreRefused) {
  CheckpointLayout l = SmallLayout(16);
  std::string dir = WriteCheckpoint(l);
  std::string manifest_file = (fs::path(dir) / "MANIFEST.json").string();
  const std::string good = ReadText(manifest_file);

  // A self-consistent manifest (rows and bytes edited together) whose table file is smaller.
  WriteText(manifest_file, absl::StrReplaceAll(good, {{"\"rows\": 37, \"bytes\": 1184,",
                                                       "\"rows\": 38, \"bytes\": 1216,"}}));
  absl::StatusOr<Manifest> m = ReadManifest(dir);
  ASSERT_TRUE(m.ok()) << m.status();
  absl::Status st = VerifyCheckpoint(dir);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Msg(st), HasSubstr((fs::path(dir) / "table-001.rows").string()));
  EXPECT_THAT(Msg(st), HasSubstr("size is 1184 bytes, the manifest says 1216"));
  WriteText(manifest_file, good);

  // A good checkpoint that does not fit the model the caller expects.
  m = ReadManifest(dir);
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(CheckLayoutMatches(*m, l).ok());
  CheckpointLayout other = l;
  other.table_rows[2] = 6;
  st = CheckLayoutMatches(*m, other);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Msg(st), HasSubstr(manifest_file));
  EXPECT_THAT(Msg(st), HasSubstr("tables[2].rows is 5 in the checkpoint, 6 expected"));
  other = l;
  other.dim = 8;
  other.payload_floats = 16;
  EXPECT_THAT(Msg(CheckLayoutMatches(*m, other)), HasSubstr("embedding_dim"));
  other = l;
  other.dense_state_floats[0] = 30;
  EXPECT_THAT(Msg(CheckLayoutMatches(*m, other)), HasSubstr("dense[0].state_floats"));
}

}  // namespace
}  // namespace ecps
