// The checkpoints under a root: only committed ones count, the newest wins, pruning.

#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ecps {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

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

}  // namespace
}  // namespace ecps
