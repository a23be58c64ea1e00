// A checkpoint save that meets a fault (a failed fsync, a torn write, its writer killed at any
// operation, then perhaps a power loss) never leaves behind anything that is taken for a
// checkpoint but the previous one, or the new one complete. Every file of the save goes
// through a FaultInjectionEnv (runtime/fault_injection_env.h); the restart reads the folder
// through the plain POSIX Env.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/fault_injection_env.h"
#include "runtime/posix_file.h"
#include "runtime/status_macros.h"

namespace ecps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using AfterTear = FaultInjectionEnv::AfterTear;

constexpr int64_t kPreviousStep = 100;
constexpr int64_t kNewStep = 200;

class CheckpointFaultTest : public CheckpointTest {
 protected:
  void SetUp() override {
    CheckpointTest::SetUp();
    previous_ = WriteCheckpoint(SmallLayout(kPreviousStep));
    ASSERT_FALSE(previous_.empty());
  }

  // A whole save through `env` (as the coordinator and two servers make it): BeginCheckpoint,
  // the table writers, the dense tensors, CommitCheckpoint; stops at the first error.
  absl::StatusOr<std::string> Save(Env* env, const std::string& root) {
    const CheckpointLayout l = SmallLayout(kNewStep);
    ASSIGN_OR_RETURN(std::string tmp, BeginCheckpoint(root, l, env));
    std::vector<uint64_t> checksums;
    for (size_t t = 0; t < l.table_rows.size(); ++t) {
      std::vector<uint64_t> partials;
      for (int s = 0; s < 2; ++s) {
        ASSIGN_OR_RETURN(std::unique_ptr<TableWriter> writer,
                         TableWriter::Open(tmp, t, l.table_rows[t], l.payload_floats, env));
        std::vector<int64_t> rows;
        for (int64_t r = s; r < l.table_rows[t]; r += 2) rows.push_back(r);
        std::vector<float> payloads = Payloads(t, rows, l.payload_floats);
        RETURN_IF_ERROR(writer->WriteRows(rows.data(), payloads.data(), rows.size()));
        RETURN_IF_ERROR(writer->Finish());
        partials.push_back(writer->checksum());
      }
      checksums.push_back(CombineChecksums(partials));
    }
    std::vector<DenseEntry> dense;
    for (size_t d = 0; d < l.dense_sizes.size(); ++d) {
      ASSIGN_OR_RETURN(DenseEntry entry,
                       WriteDense(tmp, d, l.step, DenseValues(d, l.dense_sizes[d], 3.0f),
                                  DenseValues(d, l.dense_state_floats[d], 4.0f), env));
      dense.push_back(entry);
    }
    std::string final_dir;
    RETURN_IF_ERROR(CommitCheckpoint(tmp, l, checksums, dense, {7, 8, 9}, &final_dir, env));
    return final_dir;
  }

  struct Counts {
    int syncs = 0;
    int appends = 0;
    int operations = 0;
  };
  // A clean save into a folder of its own, to count its operations.
  Counts CountedSave() {
    FaultInjectionEnv env;
    absl::StatusOr<std::string> saved = Save(&env, root_ + "/count");
    EXPECT_TRUE(saved.ok()) << saved.status();
    return Counts{env.syncs(), env.appends(), env.operations()};
  }

  // After a restart: the previous checkpoint is the only one listed, and it loads whole.
  void ExpectOnlyThePrevious() {
    absl::StatusOr<std::vector<std::string>> listed = ListCheckpoints(root_);
    ASSERT_TRUE(listed.ok()) << listed.status();
    EXPECT_THAT(*listed, ElementsAre(previous_));
    absl::Status verified = VerifyCheckpoint(previous_);
    EXPECT_TRUE(verified.ok()) << verified;
  }

  std::string NewDir() const { return JoinPath(root_, CheckpointDirName(kNewStep)); }

  std::string previous_;
};

// (a) An fsync that fails, whichever of the save's it is (the servers' of their files, the
// committer's of every file, the manifest's, the folders'): the save reports it, and neither
// then nor after a power loss is anything but the previous checkpoint listed.
TEST_F(CheckpointFaultTest, AFailedFsyncAnywhereFailsTheSaveAndKeepsThePreviousCheckpoint) {
  const int syncs = CountedSave().syncs;
  ASSERT_GE(syncs, 10);
  for (int n = 1; n <= syncs; ++n) {
    SCOPED_TRACE(absl::StrCat("fsync ", n, " of ", syncs, " fails"));
    FaultInjectionEnv env;
    env.FailSync(n);
    absl::StatusOr<std::string> saved = Save(&env, root_);
    ASSERT_FALSE(saved.ok()) << "the save reported " << *saved;
    EXPECT_THAT(saved.status().message(), HasSubstr("fsync failed: injected fault"));
    ASSERT_NO_FATAL_FAILURE(ExpectOnlyThePrevious());
    env.Crash();
    ASSERT_TRUE(env.DropUnsyncedData().ok());
    ASSERT_NO_FATAL_FAILURE(ExpectOnlyThePrevious());
  }
}

// (b) A torn write, whichever of the save's it is (a dense tensor's, the manifest's), after
// which the writer fails or dies: the save is never committed, and what it left refuses to
// load, naming its file.
TEST_F(CheckpointFaultTest, ATornWriteIsNeverTakenForACheckpoint) {
  const int appends = CountedSave().appends;
  ASSERT_GE(appends, 3);
  for (AfterTear after : {AfterTear::kFail, AfterTear::kCrash}) {
    for (int n = 1; n <= appends; ++n) {
      SCOPED_TRACE(absl::StrCat("write ", n, " of ", appends, " torn, then ",
                                after == AfterTear::kFail ? "an error" : "the writer dies"));
      FaultInjectionEnv env;
      env.TearWrite(n, after);
      absl::StatusOr<std::string> saved = Save(&env, root_);
      ASSERT_FALSE(saved.ok()) << "the save reported " << *saved;
      EXPECT_THAT(saved.status().message(), HasSubstr(NewDir() + ".tmp/"));
      ASSERT_NO_FATAL_FAILURE(ExpectOnlyThePrevious());
      for (const std::string& dir : {NewDir() + ".tmp", NewDir()}) {
        absl::Status refused = VerifyCheckpoint(dir);
        EXPECT_FALSE(refused.ok()) << dir;
        EXPECT_THAT(refused.message(), HasSubstr(dir + "/"));
      }
    }
  }
}

// (c) The writer killed before any one operation of the save (between the manifest's write
// and its rename, between the commit and the rename of step-N.tmp ...), then the power lost:
// after the restart only the previous checkpoint is listed, until the rename that publishes
// the new one has happened; then the new one is listed, and it is whole.
TEST_F(CheckpointFaultTest, AWriterKilledAtAnyPointLeavesThePreviousOrTheWholeNewCheckpoint) {
  const int operations = CountedSave().operations;
  ASSERT_GE(operations, 20);
  const int publish = operations - 1;  // the rename of step-N.tmp, before the fsync of ROOT
  for (int n = 1; n <= operations; ++n) {
    SCOPED_TRACE(absl::StrCat("killed before operation ", n, " of ", operations));
    FaultInjectionEnv env;
    env.CrashAt(n);
    ASSERT_FALSE(Save(&env, root_).ok());
    ASSERT_TRUE(env.DropUnsyncedData().ok());
    if (n <= publish) {
      ASSERT_NO_FATAL_FAILURE(ExpectOnlyThePrevious());
      continue;
    }
    absl::StatusOr<std::vector<std::string>> listed = ListCheckpoints(root_);
    ASSERT_TRUE(listed.ok()) << listed.status();
    EXPECT_THAT(*listed, ElementsAre(NewDir(), previous_));
    absl::Status verified = VerifyCheckpoint(NewDir());
    EXPECT_TRUE(verified.ok()) << verified;
  }
}

// (c), the case by name: the manifest is complete and durable in step-N.tmp, the writer dies
// before the rename. Only the name keeps it from being taken, and it does.
TEST_F(CheckpointFaultTest, AWriterKilledBetweenTheLastWriteAndTheRenameLeavesThePrevious) {
  const int operations = CountedSave().operations;
  FaultInjectionEnv env;
  env.CrashAt(operations - 1);
  absl::Status s = Save(&env, root_).status();
  EXPECT_THAT(s.message(), HasSubstr(NewDir() + ": the writer is dead"));
  ASSERT_TRUE(env.DropUnsyncedData().ok());
  absl::StatusOr<Manifest> manifest = ReadManifest(NewDir() + ".tmp");
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  EXPECT_EQ(manifest->layout.step, kNewStep);
  ASSERT_NO_FATAL_FAILURE(ExpectOnlyThePrevious());
  absl::StatusOr<std::string> latest = LatestCheckpoint(root_);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, previous_);
  // The next save cleans the leftover up and commits.
  absl::StatusOr<std::string> saved = Save(Env::Default(), root_);
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(*LatestCheckpoint(root_), NewDir());
  EXPECT_TRUE(VerifyCheckpoint(NewDir()).ok());
}

}  // namespace
}  // namespace ecps
