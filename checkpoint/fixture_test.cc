// A checkpoint written by an earlier build (checkpoint/testdata/pre-xxhash/, committed with
// the hand-written XXH64 and JSON code) must still read and verify: the format is what is on
// disk, not what the code of the day produces. The fixture is never regenerated.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "gtest/gtest.h"

namespace ecps {
namespace {

namespace fs = std::filesystem;

const std::string kFixture = std::string(ECPS_CHECKPOINT_FIXTURE_DIR) + "/step-000000042";

// The values the fixture's writer stored: float k of row r of table t.
float FixtureValue(int table, int64_t row, int k) {
  return static_cast<float>(table * 1000 + row * 10 + k) * 0.125f - 3.0f;
}

CheckpointLayout FixtureLayout() {
  CheckpointLayout l;
  l.job = "fixture";
  l.step = 42;
  l.dim = 4;
  l.payload_floats = 5;
  l.sparse_optimizer = "adagrad";
  l.dense_optimizer = "adam";
  l.table_rows = {6, 3};
  l.dense_sizes = {7};
  l.dense_state_floats = {15};
  return l;
}

std::vector<float> FixtureWeights() {
  std::vector<float> w(7);
  for (int i = 0; i < 7; ++i) w[i] = 0.5f * static_cast<float>(i) - 1.0f;
  return w;
}
std::vector<float> FixtureState() {
  std::vector<float> s(15);
  for (int i = 0; i < 15; ++i) s[i] = 0.25f * static_cast<float>(i);
  return s;
}

// The checksums the earlier build computed, as its manifest records them.
constexpr uint64_t kTable0Checksum = 0x0984fd6c481a31c4ULL;
constexpr uint64_t kTable1Checksum = 0x9564bada50bddc0dULL;
constexpr uint64_t kDenseChecksum = 0xa1e4623f03ec94caULL;

TEST(CheckpointFixtureTest, ManifestWrittenBeforeTheChangeStillParses) {
  auto m = ReadManifest(kFixture);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->format_version, 1);
  EXPECT_EQ(m->created, "2026-12-02T02:43:51+00:00");
  EXPECT_EQ(m->layout, FixtureLayout());
  EXPECT_EQ(m->table_checksums, (std::vector<uint64_t>{kTable0Checksum, kTable1Checksum}));
  ASSERT_EQ(m->dense.size(), 1u);
  EXPECT_EQ(m->dense[0], (DenseEntry{17, kDenseChecksum}));
  EXPECT_EQ(m->reader_positions, (std::vector<int64_t>{100, 250}));
}

// Today's manifest writer produces the earlier build's text byte for byte.
TEST(CheckpointFixtureTest, TodaysManifestTextIsTheFixturesText) {
  std::ifstream in(kFixture + "/MANIFEST.json", std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  ASSERT_FALSE(text.str().empty());
  auto m = ReadManifest(kFixture);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(ManifestToJson(*m), text.str());
}

TEST(CheckpointFixtureTest, CheckpointWrittenBeforeTheChangeStillVerifies) {
  ASSERT_TRUE(VerifyCheckpoint(kFixture).ok()) << VerifyCheckpoint(kFixture);
  auto m = ReadManifest(kFixture);
  ASSERT_TRUE(m.ok()) << m.status();
  for (int t = 0; t < 2; ++t) {
    auto reader = TableReader::Open(*m, t);
    ASSERT_TRUE(reader.ok()) << reader.status();
    const int64_t rows = m->layout.table_rows[t];
    std::vector<int64_t> ids;
    for (int64_t r = rows - 1; r >= 0; --r) ids.push_back(r);
    std::vector<float> out(ids.size() * 5);
    ASSERT_TRUE((*reader)->ReadRows(ids.data(), rows, out.data()).ok());
    for (size_t i = 0; i < ids.size(); ++i) {
      for (int k = 0; k < 5; ++k) EXPECT_EQ(out[i * 5 + k], FixtureValue(t, ids[i], k));
    }
  }
  std::vector<float> weights, state;
  int64_t version = 0;
  ASSERT_TRUE(ReadDense(*m, 0, &weights, &state, &version).ok());
  EXPECT_EQ(weights, FixtureWeights());
  EXPECT_EQ(state, FixtureState());
  EXPECT_EQ(version, 17);
}

// Today's writer, given the same contents, computes the same checksums as the earlier build.
TEST(CheckpointFixtureTest, TodaysWriterReproducesTheFixturesChecksums) {
  const std::string root = (fs::path(testing::TempDir()) / "checkpoint_fixture_rewrite").string();
  fs::remove_all(root);
  const CheckpointLayout l = FixtureLayout();
  auto tmp = BeginCheckpoint(root, l);
  ASSERT_TRUE(tmp.ok()) << tmp.status();
  std::vector<uint64_t> sums;
  for (int t = 0; t < 2; ++t) {
    auto writer = TableWriter::Open(*tmp, t, l.table_rows[t], l.payload_floats);
    ASSERT_TRUE(writer.ok()) << writer.status();
    std::vector<int64_t> rows;
    std::vector<float> payloads;
    for (int64_t r = 0; r < l.table_rows[t]; ++r) {
      rows.push_back(r);
      for (int k = 0; k < l.payload_floats; ++k) payloads.push_back(FixtureValue(t, r, k));
    }
    ASSERT_TRUE((*writer)->WriteRows(rows.data(), payloads.data(), l.table_rows[t]).ok());
    ASSERT_TRUE((*writer)->Finish().ok());
    sums.push_back((*writer)->checksum());
  }
  EXPECT_EQ(sums, (std::vector<uint64_t>{kTable0Checksum, kTable1Checksum}));
  auto dense = WriteDense(*tmp, 0, 17, FixtureWeights(), FixtureState());
  ASSERT_TRUE(dense.ok()) << dense.status();
  EXPECT_EQ(dense->checksum, kDenseChecksum);
  fs::remove_all(root);
}

}  // namespace
}  // namespace ecps
