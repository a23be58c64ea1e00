// Shared by the checkpoint tests: deterministic payloads, file tampering, and a fixture that
// writes whole checkpoints into a fresh temporary root.
#ifndef ECPS_CHECKPOINT_CHECKPOINT_TEST_UTIL_H_
#define ECPS_CHECKPOINT_CHECKPOINT_TEST_UTIL_H_

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "checkpoint/checkpoint.h"
#include "gtest/gtest.h"

namespace ecps {

// A deterministic, irregular payload for (table, row): every byte depends on both.
inline std::vector<float> Payload(int table, int64_t row, int payload_floats) {
  std::vector<float> p(payload_floats);
  uint64_t x = (static_cast<uint64_t>(table) << 40) ^ static_cast<uint64_t>(row) * 0x9E37ULL;
  for (int k = 0; k < payload_floats; ++k) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    p[k] = static_cast<float>(static_cast<int64_t>(x >> 33) % 20001 - 10000) / 1000.0f;
  }
  return p;
}

inline std::vector<float> Payloads(int table, const std::vector<int64_t>& rows,
                                   int payload_floats) {
  std::vector<float> out;
  out.reserve(rows.size() * payload_floats);
  for (int64_t r : rows) {
    std::vector<float> p = Payload(table, r, payload_floats);
    out.insert(out.end(), p.begin(), p.end());
  }
  return out;
}

inline std::vector<float> DenseValues(int tensor, int64_t n, float scale) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = scale * (tensor + 1) + 0.25f * static_cast<float>(i);
  return v;
}

inline std::string Msg(const absl::Status& s) { return std::string(s.message()); }

inline std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

inline void FlipByte(const std::string& path, int64_t offset) {
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
    std::string tmpl = (std::filesystem::path(::testing::TempDir()) / "ckpt-test-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
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

}  // namespace ecps

#endif  // ECPS_CHECKPOINT_CHECKPOINT_TEST_UTIL_H_
