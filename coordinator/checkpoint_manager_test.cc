#include "coordinator/checkpoint_manager.h"

#include <memory>

#include "runtime/clock.h"
#include "coordinator/coordinator_test_util.h"
#include "coordinator/scrub_manager.h"
#include "gtest/gtest.h"
#include "proto/coordinator_state.pb.h"
#include "proto/ecps.pb.h"

namespace ecps {
namespace {

using testing::ServerHeartbeat;
using testing::ServerRegistration;
using testing::WorkerHeartbeat;
using testing::WorkerRegistration;

// The checkpoint and scrub managers over a real membership manager, wired as the service
// wires them (coordinator_service.cc), without the service: one server, two workers.
class OperationsTest : public ::testing::Test {
 protected:
  explicit OperationsTest(bool save_final = false, bool final_scrub = false) {
    FailureManager::Options options;
    options.detector.heartbeat_timeout = absl::Milliseconds(1500);
    options.detector.suspicion_timeout = absl::Milliseconds(500);
    failures_ = std::make_unique<FailureManager>(&clock_, options);
    progress_ = std::make_unique<ProgressManager>(&clock_, 2, 100);
    Membership::Config config;
    config.servers = 1;
    config.workers = 2;
    MembershipManager::Hooks hooks{
        [this](v1::CoordinatorState* state) {
          checkpoints_->Save(state);
          scrubs_->Save(state);
        },
        [this] { return checkpoints_->FinalWanted(); }, [this] { return scrubs_->FinalWanted(); },
        [this] { checkpoints_->RequestFinal(); }, [this] { scrubs_->RequestFinal(); }};
    membership_ = std::make_unique<MembershipManager>(
        &clock_, config, MembershipManager::Options{"test-job", absl::Seconds(120),
                                                    absl::Milliseconds(200)},
        failures_.get(), progress_.get(), std::move(hooks));
    checkpoints_ = std::make_unique<CheckpointManager>(
        &clock_, CheckpointSchedule(false, 0, 0, save_final), "test-job", membership_.get(),
        progress_.get());
    scrubs_ = std::make_unique<ScrubManager>(final_scrub, membership_.get());
  }
  void Register() {
    v1::RegisterResponse r;
    ASSERT_TRUE(membership_->Register(ServerRegistration(0, "s0"), &r).ok());
    ASSERT_TRUE(membership_->Register(WorkerRegistration(0, "w0"), &r).ok());
    ASSERT_TRUE(membership_->Register(WorkerRegistration(1, "w1"), &r).ok());
  }
  void Beat(const v1::HeartbeatRequest& request) {
    v1::HeartbeatResponse h;
    ASSERT_TRUE(membership_->Heartbeat(request, &h).ok());
  }
  static v1::CheckpointReport Saved(int64_t step) {
    v1::CheckpointReport report;
    report.set_done(true);
    report.set_step(step);
    report.set_dir("ckpt-" + std::to_string(step));
    return report;
  }

  FakeClock clock_;
  std::unique_ptr<FailureManager> failures_;
  std::unique_ptr<ProgressManager> progress_;
  std::unique_ptr<MembershipManager> membership_;
  std::unique_ptr<CheckpointManager> checkpoints_;
  std::unique_ptr<ScrubManager> scrubs_;
};

TEST_F(OperationsTest, ACheckpointWaitsForEveryServerAndRecordsTheWorkersCut) {
  v1::CheckpointReport report;
  EXPECT_EQ(checkpoints_->Checkpoint(&report).code(), absl::StatusCode::kFailedPrecondition)
      << "no checkpointer";
  CheckpointProgress cut;
  int saves = 0;
  checkpoints_->SetCheckpointer([&](const v1::ClusterMap& map,
                                    const std::function<CheckpointProgress()>& progress) {
    ++saves;
    EXPECT_EQ(map.servers(0).instance(), "s0");
    cut = progress();
    return Saved(cut.step);
  });
  Register();
  EXPECT_EQ(checkpoints_->Checkpoint(&report).code(), absl::StatusCode::kFailedPrecondition)
      << "server 0 is not active yet";
  EXPECT_EQ(saves, 0);
  Beat(ServerHeartbeat(0, "s0"));
  v1::HeartbeatRequest w0 = WorkerHeartbeat(0, "w0", 7);
  w0.mutable_worker()->set_reader_position(70);
  Beat(w0);
  v1::HeartbeatRequest w1 = WorkerHeartbeat(1, "w1", 9);
  w1.mutable_worker()->set_reader_position(90);
  Beat(w1);
  ASSERT_TRUE(checkpoints_->Checkpoint(&report).ok());
  EXPECT_EQ(cut.step, 7) << "the slowest worker's step";
  EXPECT_EQ(cut.reader_positions, (std::vector<int64_t>{70, 90}));
  v1::StatusResponse status;
  checkpoints_->FillStatus(&status);
  EXPECT_EQ(status.checkpoint().dir(), "ckpt-7");
}

TEST_F(OperationsTest, ARollbackIsSavedBeforeWorkersHearOfItAndSurvivesATakeover) {
  EXPECT_FALSE(checkpoints_->BeginRollback()) << "no reloader";
  checkpoints_->SetReloader([](const v1::ClusterMap&) { return Saved(5); });
  Register();
  Beat(ServerHeartbeat(0, "s0"));
  std::vector<v1::CoordinatorState> saved;
  membership_->SetStateSaver([&saved](const v1::CoordinatorState& state) {
    saved.push_back(state);
    return absl::OkStatus();
  });
  ASSERT_TRUE(checkpoints_->BeginRollback());
  EXPECT_EQ(saved.back().rollback_generation(), 1u);
  v1::HeartbeatResponse response;
  checkpoints_->FillHeartbeat(0, 2, &response);
  EXPECT_EQ(response.rollback().generation(), 1u);

  CheckpointManager restored(&clock_, CheckpointSchedule(false, 0, 0, false), "test-job",
                             membership_.get(), progress_.get());
  restored.Restore(saved.back());
  v1::HeartbeatResponse after;
  restored.FillHeartbeat(0, 2, &after);
  EXPECT_EQ(after.rollback().generation(), 1u);
}

class FinalOperationsTest : public OperationsTest {
 protected:
  FinalOperationsTest() : OperationsTest(/*save_final=*/true, /*final_scrub=*/true) {}
};

TEST_F(FinalOperationsTest, TheJobEndsAfterItsFinalCheckpointThenItsFinalScrub) {
  checkpoints_->SetCheckpointer(
      [](const v1::ClusterMap&, const std::function<CheckpointProgress()>& progress) {
        return Saved(progress().step);
      });
  int scrubs = 0;
  scrubs_->SetScrubber([&scrubs](const v1::ClusterMap&) {
    ++scrubs;
    v1::ScrubReport clean;
    clean.set_clean(true);
    return clean;
  });
  Register();
  Beat(ServerHeartbeat(0, "s0"));
  scrubs_->RunPendingScrub();
  checkpoints_->RunPendingCheckpoint();
  EXPECT_EQ(scrubs, 0) << "nothing is pending before every worker is done";
  Beat(WorkerHeartbeat(0, "w0", 100, /*done=*/true));
  Beat(WorkerHeartbeat(1, "w1", 100, /*done=*/true));
  EXPECT_EQ(membership_->phase(), v1::JOB_RUNNING);
  scrubs_->RunPendingScrub();
  EXPECT_EQ(scrubs, 0) << "the final checkpoint comes first";
  checkpoints_->RunPendingCheckpoint();
  EXPECT_EQ(membership_->phase(), v1::JOB_RUNNING) << "now the final scrub";
  scrubs_->RunPendingScrub();
  EXPECT_EQ(scrubs, 1);
  EXPECT_EQ(membership_->phase(), v1::JOB_FINISHED);
  v1::StatusResponse status;
  checkpoints_->FillStatus(&status);
  EXPECT_TRUE(status.checkpoint().final());
  EXPECT_EQ(status.checkpoint().step(), 100);
}

TEST_F(FinalOperationsTest, AFinalScrubThatFindsAMismatchFailsTheJob) {
  scrubs_->SetScrubber([](const v1::ClusterMap&) {
    v1::ScrubReport report;
    report.set_parity_mismatches(3);
    return report;
  });
  Register();
  Beat(ServerHeartbeat(0, "s0"));
  Beat(WorkerHeartbeat(0, "w0", 100, /*done=*/true));
  Beat(WorkerHeartbeat(1, "w1", 100, /*done=*/true));
  scrubs_->RunPendingScrub();
  EXPECT_EQ(membership_->phase(), v1::JOB_FAILED);
  EXPECT_FALSE(membership_->error().empty());
  v1::StatusResponse status;
  scrubs_->FillStatus(&status);
  EXPECT_EQ(status.scrub().parity_mismatches(), 3);
}

}  // namespace
}  // namespace ecps
