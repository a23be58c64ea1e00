// Unit tests of the coordinator's job bookkeeping: the rollback controller, the checkpoint
// schedule and the final scrub (the phase function has job_phase_test.cc).
#include <vector>

#include "coordinator/checkpoint_schedule.h"
#include "coordinator/final_scrub.h"
#include "coordinator/rollback_controller.h"
#include "gtest/gtest.h"

namespace ecps {
namespace {

v1::WorkerProgress Progress(uint64_t paused, uint64_t resumed, bool done = false) {
  v1::WorkerProgress p;
  p.set_paused_generation(paused);
  p.set_resumed_generation(resumed);
  p.set_done(done);
  return p;
}

TEST(RollbackControllerTest, WalksThroughPauseReloadAndResume) {
  RollbackController rollback;
  v1::WorkerProgress w0 = Progress(0, 0), w1 = Progress(0, 0);
  WorkerReports workers = {&w0, &w1};
  EXPECT_FALSE(rollback.RollingBack(workers)) << "no rollback yet";
  v1::HeartbeatResponse quiet;
  rollback.FillHeartbeat(0, 2, &quiet);
  EXPECT_FALSE(quiet.has_rollback());

  ASSERT_TRUE(rollback.Begin(workers).ok());
  EXPECT_EQ(rollback.generation(), 1u);
  EXPECT_TRUE(rollback.RollingBack(workers));
  EXPECT_FALSE(rollback.ReadyToReload(workers)) << "no worker paused yet";
  w0 = Progress(1, 0);
  EXPECT_FALSE(rollback.ReadyToReload(workers)) << "worker 1 still pushes";
  w1 = Progress(1, 0);
  EXPECT_TRUE(rollback.ReadyToReload(workers));

  v1::HeartbeatResponse waiting;
  rollback.FillHeartbeat(1, 2, &waiting);
  EXPECT_EQ(waiting.rollback().generation(), 1u);
  EXPECT_FALSE(waiting.rollback().ready());

  v1::CheckpointReport loaded;
  loaded.set_dir("/ckpt/step-000000040");
  loaded.set_step(40);
  loaded.add_reader_positions(4000);
  loaded.add_reader_positions(4100);
  ASSERT_TRUE(rollback.Reloaded(1, loaded));
  EXPECT_FALSE(rollback.ReadyToReload(workers)) << "reloaded once";
  EXPECT_TRUE(rollback.RollingBack(workers)) << "no worker rewound yet";
  v1::HeartbeatResponse go;
  rollback.FillHeartbeat(1, 2, &go);
  EXPECT_TRUE(go.rollback().ready());
  EXPECT_EQ(go.rollback().dir(), "/ckpt/step-000000040");
  EXPECT_EQ(go.rollback().step(), 40);
  EXPECT_EQ(go.rollback().reader_position(), 4100);
  v1::HeartbeatResponse other_job;
  rollback.FillHeartbeat(1, 3, &other_job);
  EXPECT_EQ(other_job.rollback().reader_position(), -1)
      << "a checkpoint of another worker count has no position for this job's workers";

  w0 = Progress(1, 1);
  EXPECT_TRUE(rollback.RollingBack(workers));
  w1 = Progress(1, 0, /*done=*/true);
  EXPECT_FALSE(rollback.RollingBack(workers)) << "a done worker has nothing to rewind";
}

TEST(RollbackControllerTest, ANewerFailureSupersedesAnOlderReload) {
  RollbackController rollback;
  v1::WorkerProgress w0 = Progress(0, 0);
  WorkerReports workers = {&w0};
  ASSERT_TRUE(rollback.Begin(workers).ok());
  ASSERT_TRUE(rollback.Begin(workers).ok());
  EXPECT_EQ(rollback.generation(), 2u);
  w0 = Progress(1, 0);
  EXPECT_FALSE(rollback.ReadyToReload(workers)) << "paused for the older rollback only";
  EXPECT_FALSE(rollback.Reloaded(1, v1::CheckpointReport()));
  EXPECT_FALSE(rollback.reloaded());
}

TEST(RollbackControllerTest, AFinishedWorkerCannotBeRewound) {
  RollbackController rollback;
  v1::WorkerProgress w0 = Progress(0, 0), w1 = Progress(0, 0, /*done=*/true);
  const absl::Status begun = rollback.Begin({&w0, &w1});
  EXPECT_EQ(begun.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(begun.message().find("worker 1"), absl::string_view::npos) << begun;
  EXPECT_EQ(rollback.generation(), 0u) << "nothing changes";
}

TEST(CheckpointScheduleTest, StepsIntervalStartsAtOnceAndFollowsRewinds) {
  CheckpointSchedule schedule(/*periodic=*/true, /*interval_steps=*/10, 0, false);
  const absl::Time t = absl::FromUnixSeconds(1000);
  EXPECT_TRUE(schedule.PeriodicDue(3, t)) << "the first is due at once";
  schedule.PeriodicTried(3, t);
  EXPECT_FALSE(schedule.PeriodicDue(12, t + absl::Hours(1)));
  EXPECT_TRUE(schedule.PeriodicDue(13, t));
  schedule.PeriodicTried(13, t);
  // A rollback rewound the job to step 5: ten steps from there, not from 13.
  schedule.PeriodicTried(5, t);
  EXPECT_TRUE(schedule.PeriodicDue(15, t));
}

TEST(CheckpointScheduleTest, SecondsIntervalNeedsProgress) {
  CheckpointSchedule schedule(/*periodic=*/true, 0, /*interval_seconds=*/30, false);
  const absl::Time t = absl::FromUnixSeconds(1000);
  EXPECT_TRUE(schedule.PeriodicDue(1, t));
  schedule.PeriodicTried(1, t);
  EXPECT_FALSE(schedule.PeriodicDue(9, t + absl::Seconds(29)));
  EXPECT_TRUE(schedule.PeriodicDue(9, t + absl::Seconds(30)));
  EXPECT_FALSE(schedule.PeriodicDue(1, t + absl::Seconds(90))) << "no step since the last";
}

TEST(CheckpointScheduleTest, NothingPeriodicWithoutAnIntervalOrInOtherModes) {
  const absl::Time t = absl::FromUnixSeconds(1000);
  EXPECT_FALSE(CheckpointSchedule(true, 0, 0, false).PeriodicDue(100, t));
  EXPECT_FALSE(CheckpointSchedule(false, 10, 0, false).PeriodicDue(100, t));
}

TEST(CheckpointScheduleTest, FinalSaveOnceWhenConfigured) {
  CheckpointSchedule off(false, 0, 0, /*save_final=*/false);
  off.RequestFinal();
  EXPECT_FALSE(off.final_wanted());
  EXPECT_FALSE(off.final_pending());

  CheckpointSchedule on(false, 0, 0, /*save_final=*/true);
  EXPECT_TRUE(on.final_wanted());
  EXPECT_FALSE(on.final_pending());
  on.RequestFinal();
  EXPECT_TRUE(on.final_pending());
  on.FinalDone();
  EXPECT_FALSE(on.final_pending());
  EXPECT_FALSE(on.final_wanted());
  on.RequestFinal();
  EXPECT_FALSE(on.final_pending()) << "saved once";
}

TEST(FinalScrubTest, CleanFinishesAndMismatchesFail) {
  FinalScrub scrub(/*wanted=*/true);
  EXPECT_TRUE(scrub.wanted());
  scrub.Request();
  EXPECT_TRUE(scrub.pending());
  v1::ScrubReport clean;
  clean.set_clean(true);
  EXPECT_TRUE(scrub.Finish(clean).ok());
  EXPECT_FALSE(scrub.pending());
  EXPECT_FALSE(scrub.wanted()) << "runs once";

  FinalScrub dirty(true);
  v1::ScrubReport mismatched;
  mismatched.set_parity_mismatches(3);
  mismatched.set_dense_mismatches(1);
  const absl::Status failed = dirty.Finish(mismatched);
  EXPECT_EQ(failed.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(failed.message().find("3 parity and 1 dense"), absl::string_view::npos) << failed;

  v1::ScrubReport broken;
  broken.set_error("server 2 unreachable");
  EXPECT_NE(FinalScrub(true).Finish(broken).message().find("server 2 unreachable"),
            absl::string_view::npos);
  EXPECT_NE(FinalScrub::Summary(broken).find("error: server 2 unreachable"), std::string::npos);

  FinalScrub none(/*wanted=*/false);
  none.Request();
  EXPECT_FALSE(none.pending()) << "modes without parity have nothing to scrub";
}

}  // namespace
}  // namespace ecps
