// The checkpoint format end to end: checksums, writers in threads and processes, readers.
#include "checkpoint/checkpoint.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/hash.h"

namespace ecps {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// ---- Checksums -----------------------------------------------------------------------------

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

}  // namespace
}  // namespace ecps
