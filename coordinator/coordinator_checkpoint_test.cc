// CoordinatorService's checkpoints through its public handlers, with a fake clock and no
// network: the final checkpoint, admin checkpoints, periodic ones in mode checkpoint,
// pruning, and none during a rollback.
#include "coordinator/coordinator_service.h"

#include <atomic>
#include <deque>
#include <thread>

#include "coordinator/coordinator_test_util.h"
#include "gtest/gtest.h"
#include "proto/ecps.pb.h"

namespace ecps {
namespace {

using testing::kToken;
using testing::ServerHeartbeat;
using testing::ServerRegistration;
using testing::TestSpec;
using testing::WireRollback;
using testing::WorkerHeartbeat;
using testing::WorkerRegistration;

using CoordinatorServiceTest = testing::CoordinatorServiceFixture;

// The final checkpoint: the job waits in RUNNING until RunPendingCheckpoint saved it, with the
// workers' final steps and reader positions; a failed save fails the job; an existing
// checkpoint of that step is kept and the job finishes.
class CoordinatorCheckpointTest : public CoordinatorServiceTest {
 protected:
  // Starts a 1-server, 2-worker job whose checkpointer returns `error` ("" = saved) with
  // `code`.
  void StartWithCheckpointer(const std::string& error,
                             absl::StatusCode code = absl::StatusCode::kAborted) {
    StartJob(1, 2);
    if (error.empty()) code = absl::StatusCode::kOk;
    service_->SetCheckpointer([this, error, code](const v1::ClusterMap& map,
                                            const std::function<CheckpointProgress()>& progress) {
      ++calls_;
      cut_ = progress();
      servers_seen_ = map.servers_size();
      v1::CheckpointReport report;
      report.set_step(cut_.step);
      for (int64_t p : cut_.reader_positions) report.add_reader_positions(p);
      report.set_error(error);
      report.set_done(error.empty());
      // What SaveCheckpointOnServers sets: the code of the status the error came from.
      report.set_error_code(static_cast<int>(code));
      if (error.empty()) report.set_dir("/ckpt/step-000000100");
      return report;
    });
  }
  void FinishWorkers() {
    v1::HeartbeatRequest w0 = WorkerHeartbeat(0, "w0", 100, /*done=*/true);
    w0.mutable_worker()->set_reader_position(12800);
    v1::HeartbeatRequest w1 = WorkerHeartbeat(1, "w1", 100, /*done=*/true);
    w1.mutable_worker()->set_reader_position(12900);
    Beat(w0);
    Beat(w1);
  }
  int calls_ = 0;
  int servers_seen_ = 0;
  CheckpointProgress cut_;
};

TEST_F(CoordinatorCheckpointTest, FinalCheckpointRunsBeforeTheJobFinishes) {
  StartWithCheckpointer("");
  FinishWorkers();
  EXPECT_EQ(service_->phase(), v1::JOB_RUNNING) << "waits for the final checkpoint";
  service_->RunPendingCheckpoint();
  EXPECT_EQ(calls_, 1);
  EXPECT_EQ(servers_seen_, 1);
  EXPECT_EQ(cut_.step, 100);
  EXPECT_EQ(cut_.reader_positions, (std::vector<int64_t>{12800, 12900}));
  EXPECT_EQ(service_->phase(), v1::JOB_FINISHED) << service_->error();
  v1::StatusResponse status = Status();
  EXPECT_TRUE(status.checkpoint().done());
  EXPECT_TRUE(status.checkpoint().final());
  EXPECT_EQ(status.checkpoint().dir(), "/ckpt/step-000000100");
  service_->RunPendingCheckpoint();
  EXPECT_EQ(calls_, 1) << "saved once";
}

TEST_F(CoordinatorCheckpointTest, FailedFinalCheckpointFailsTheJob) {
  StartWithCheckpointer("INTERNAL: /ckpt/step-000000100.tmp/table-000.rows: write failed");
  FinishWorkers();
  service_->RunPendingCheckpoint();
  EXPECT_EQ(service_->phase(), v1::JOB_FAILED);
  EXPECT_NE(service_->error().find("final checkpoint failed"), std::string::npos);
  EXPECT_NE(service_->error().find("table-000.rows"), std::string::npos);
}

TEST_F(CoordinatorCheckpointTest, ExistingFinalCheckpointIsKept) {
  StartWithCheckpointer("ALREADY_EXISTS: /ckpt/step-000000100: already committed",
                        absl::StatusCode::kAlreadyExists);
  FinishWorkers();
  service_->RunPendingCheckpoint();
  EXPECT_EQ(service_->phase(), v1::JOB_FINISHED) << service_->error();
}

TEST_F(CoordinatorCheckpointTest, AdminCheckpointNeedsTheTokenAndActiveServers) {
  StartWithCheckpointer("");
  v1::CheckpointRequest request;
  FillHeader(request.mutable_header(), "wrong", 0, "cli");
  v1::CheckpointReport report;
  EXPECT_TRUE(absl::IsUnauthenticated(service_->Checkpoint(request, &report)));
  EXPECT_EQ(calls_, 0);
  FillHeader(request.mutable_header(), kToken, 0, "cli");
  Beat(WorkerHeartbeat(0, "w0", 7));
  ASSERT_TRUE(service_->Checkpoint(request, &report).ok());
  EXPECT_EQ(calls_, 1);
  EXPECT_EQ(report.step(), 0) << "the minimum over workers (worker 1 has not reported)";
  EXPECT_EQ(service_->phase(), v1::JOB_RUNNING);
}

TEST_F(CoordinatorCheckpointTest, WithoutSaveFinalTheJobFinishesAtOnce) {
  JobSpec spec = TestSpec(1, 1);
  spec.fault_tolerance.checkpoint.save_final = false;
  ASSERT_NO_FATAL_FAILURE(MakeService(spec));
  service_->SetCheckpointer(
      [this](const v1::ClusterMap&, const std::function<CheckpointProgress()>&) {
        ++calls_;
        return v1::CheckpointReport();
      });
  Register(ServerRegistration(0, "s0"));
  Beat(ServerHeartbeat(0, "s0"));
  Register(WorkerRegistration(0, "w0"));
  Beat(WorkerHeartbeat(0, "w0", 100, /*done=*/true));
  EXPECT_EQ(service_->phase(), v1::JOB_FINISHED);
  EXPECT_EQ(calls_, 0);
}

TEST_F(CoordinatorCheckpointTest, PeriodicCheckpointsInModeCheckpoint) {
  JobSpec spec = TestSpec(1, 1);
  spec.fault_tolerance.mode = FaultToleranceMode::kCheckpoint;
  spec.fault_tolerance.checkpoint.interval_steps = 10;
  ASSERT_NO_FATAL_FAILURE(MakeService(spec));
  std::vector<int64_t> steps;
  service_->SetCheckpointer(
      [&steps](const v1::ClusterMap&, const std::function<CheckpointProgress()>& progress) {
        v1::CheckpointReport report;
        report.set_step(progress().step);
        report.set_done(true);
        steps.push_back(report.step());
        return report;
      });
  Register(ServerRegistration(0, "s0"));
  Beat(ServerHeartbeat(0, "s0"));
  Register(WorkerRegistration(0, "w0"));
  for (int64_t step : {5, 10, 12, 19, 21, 30}) {
    Beat(WorkerHeartbeat(0, "w0", step));
    service_->RunPeriodicCheckpoint();
  }
  // The first at once (a rollback always has a checkpoint), then every 10 steps.
  EXPECT_EQ(steps, (std::vector<int64_t>{5, 19, 30}));
}

// The pruner runs after every committed save (periodic, admin, final: before the job
// finishes), with the save's report, and never after a failed one.
TEST_F(CoordinatorCheckpointTest, PrunesAfterEveryCommittedSave) {
  JobSpec spec = TestSpec(1, 1);
  spec.fault_tolerance.mode = FaultToleranceMode::kCheckpoint;
  spec.fault_tolerance.checkpoint.interval_steps = 10;
  ASSERT_NO_FATAL_FAILURE(MakeService(spec));
  bool fail_next = false;
  service_->SetCheckpointer(
      [&fail_next](const v1::ClusterMap&, const std::function<CheckpointProgress()>& progress) {
        v1::CheckpointReport report;
        report.set_step(progress().step);
        report.set_done(!fail_next);
        if (fail_next) report.set_error("INTERNAL: disk full");
        fail_next = false;
        return report;
      });
  std::vector<int64_t> pruned;
  std::vector<v1::JobPhase> phases;
  service_->SetPruner([&](const v1::CheckpointReport& saved) {
    pruned.push_back(saved.step());
    phases.push_back(service_->phase());
    return std::vector<std::string>{"/ckpt/step-000000001"};
  });
  Register(ServerRegistration(0, "s0"));
  Beat(ServerHeartbeat(0, "s0"));
  Register(WorkerRegistration(0, "w0"));
  Beat(WorkerHeartbeat(0, "w0", 5));
  service_->RunPeriodicCheckpoint();  // step 5: saved, pruned
  Beat(WorkerHeartbeat(0, "w0", 15));
  fail_next = true;
  service_->RunPeriodicCheckpoint();  // step 15: failed, nothing pruned
  Beat(WorkerHeartbeat(0, "w0", 17));
  v1::CheckpointRequest request;
  FillHeader(request.mutable_header(), kToken, 0, "cli");
  v1::CheckpointReport report;
  ASSERT_TRUE(service_->Checkpoint(request, &report).ok());  // step 17: saved, pruned
  Beat(WorkerHeartbeat(0, "w0", 20, /*done=*/true));
  service_->RunPendingCheckpoint();  // the final one, step 20
  EXPECT_EQ(pruned, (std::vector<int64_t>{5, 17, 20}));
  EXPECT_EQ(phases, (std::vector<v1::JobPhase>{v1::JOB_RUNNING, v1::JOB_RUNNING, v1::JOB_RUNNING}))
      << "the final save prunes before the job finishes";
  EXPECT_EQ(service_->phase(), v1::JOB_FINISHED) << service_->error();
}

// Mode checkpoint, a server dies: until every server has reloaded and every worker has
// rewound, no checkpoint may be deleted (the replacement loads the newest) and none is taken
// (the servers hold no consistent state, then the workers' reports are from before).
TEST_F(CoordinatorCheckpointTest, NothingIsPrunedOrSavedDuringARollback) {
  JobSpec spec = TestSpec(2, 1);
  spec.fault_tolerance.mode = FaultToleranceMode::kCheckpoint;
  spec.fault_tolerance.checkpoint.interval_steps = 10;
  ASSERT_NO_FATAL_FAILURE(MakeService(spec));
  WireRollback(service_.get());
  // The first save: server 1 dies while it runs (its last heartbeat is 2 s old when the save
  // ends), so the save commits but nothing is pruned.
  int saves = 0;
  service_->SetCheckpointer(
      [&](const v1::ClusterMap&, const std::function<CheckpointProgress()>& progress) {
        v1::CheckpointReport report;
        report.set_step(progress().step);
        report.set_done(true);
        if (++saves == 1) {
          clock_.Advance(absl::Seconds(2));
          Beat(ServerHeartbeat(0, "s0"));
          Beat(WorkerHeartbeat(0, "w0", 5));
          service_->Tick();
        }
        return report;
      });
  int prunes = 0;
  service_->SetPruner([&prunes](const v1::CheckpointReport&) {
    ++prunes;
    return std::vector<std::string>{};
  });
  Register(ServerRegistration(0, "s0"));
  Register(ServerRegistration(1, "s1"));
  Beat(ServerHeartbeat(0, "s0"));
  Beat(ServerHeartbeat(1, "s1"));
  Register(WorkerRegistration(0, "w0"));
  Beat(WorkerHeartbeat(0, "w0", 5));
  service_->RunPeriodicCheckpoint();
  EXPECT_EQ(saves, 1);
  EXPECT_EQ(prunes, 0) << "server 1 died during the save";
  ASSERT_EQ(service_->phase(), v1::JOB_RECOVERING) << service_->error();

  // The replacement is active, the worker has not paused yet: still no admin checkpoint.
  Register(ServerRegistration(1, "s1-new"));
  Beat(ServerHeartbeat(1, "s1-new"));
  v1::CheckpointRequest request;
  FillHeader(request.mutable_header(), kToken, 0, "cli");
  v1::CheckpointReport report;
  absl::Status refused = service_->Checkpoint(request, &report);
  EXPECT_TRUE(absl::IsFailedPrecondition(refused)) << refused;
  EXPECT_NE(refused.message().find("rollback"), std::string::npos) << refused;
  EXPECT_EQ(saves, 1);

  // The worker pauses (after step 8), every server reloads step 5's checkpoint. The worker
  // has not heard yet: its report still says step 8, so a save now would record step 8 and
  // its reader position with step 5's rows. Refused until it has rewound.
  v1::HeartbeatRequest paused = WorkerHeartbeat(0, "w0", 8);
  paused.mutable_worker()->set_paused_generation(1);
  Beat(paused);
  service_->RunPendingRollback();
  refused = service_->Checkpoint(request, &report);
  EXPECT_TRUE(absl::IsFailedPrecondition(refused)) << refused;
  service_->RunPeriodicCheckpoint();
  EXPECT_EQ(saves, 1);
  EXPECT_EQ(prunes, 0);

  // Rewound (step 5, its checkpoint position): saves and pruning go on, from step 5.
  v1::HeartbeatRequest resumed = WorkerHeartbeat(0, "w0", 5);
  resumed.mutable_worker()->set_paused_generation(1);
  resumed.mutable_worker()->set_resumed_generation(1);
  resumed.mutable_worker()->set_reader_position(640);
  Beat(resumed);
  ASSERT_TRUE(service_->Checkpoint(request, &report).ok());
  EXPECT_EQ(saves, 2);
  EXPECT_EQ(report.step(), 5);
  EXPECT_EQ(prunes, 1);
}

}  // namespace
}  // namespace ecps
