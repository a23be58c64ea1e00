#include "coordinator/progress_manager.h"

#include "runtime/clock.h"
#include "gtest/gtest.h"
#include "proto/ecps.pb.h"

namespace ecps {
namespace {

v1::WorkerProgress Step(int64_t step, int64_t samples) {
  v1::WorkerProgress p;
  p.set_step(step);
  p.set_samples(samples);
  return p;
}

TEST(ProgressManagerTest, LeavingStartingStartsTheJobsClockAndAFinalPhaseStopsIt) {
  FakeClock clock;
  ProgressManager progress(&clock, 1, 100);
  clock.Advance(absl::Seconds(5));
  EXPECT_EQ(progress.Summarize().elapsed_s, 0) << "no clock before the job runs";
  progress.PhaseChanged(v1::JOB_STARTING, v1::JOB_RUNNING);
  clock.Advance(absl::Seconds(10));
  EXPECT_DOUBLE_EQ(progress.Summarize().elapsed_s, 10);
  progress.PhaseChanged(v1::JOB_RUNNING, v1::JOB_FINISHED);
  clock.Advance(absl::Seconds(10));
  EXPECT_DOUBLE_EQ(progress.Summarize().elapsed_s, 10) << "a final phase stops the clock";
}

TEST(ProgressManagerTest, AJobThatFailsWhileStartingNeverRan) {
  FakeClock clock;
  ProgressManager progress(&clock, 1, 100);
  progress.PhaseChanged(v1::JOB_STARTING, v1::JOB_FAILED);
  clock.Advance(absl::Seconds(10));
  EXPECT_EQ(progress.Summarize().elapsed_s, 0);
}

TEST(ProgressManagerTest, StatusGetsTheSummaryAndEachWorkersShareOfTheRate) {
  FakeClock clock;
  ProgressManager progress(&clock, 2, 100);
  progress.PhaseChanged(v1::JOB_STARTING, v1::JOB_RUNNING);
  for (int i = 0; i <= 4; ++i) {
    progress.Report(0, Step(10 * i, 1000 * i));
    progress.Report(1, Step(10 * i, 3000 * i));
    if (i < 4) clock.Advance(absl::Milliseconds(500));
  }
  v1::StatusResponse status;
  v1::NodeInfo* server = status.add_nodes();
  server->set_role(v1::ROLE_SERVER);
  server->set_id(0);
  for (int w = 0; w < 2; ++w) {
    v1::NodeInfo* worker = status.add_nodes();
    worker->set_role(v1::ROLE_WORKER);
    worker->set_id(w);
    worker->mutable_worker()->set_samples_per_s(-1);  // what the worker said of itself
  }
  progress.FillStatus(&status);
  EXPECT_EQ(status.step(), 40);
  EXPECT_EQ(status.total_steps(), 100);
  EXPECT_EQ(status.samples(), 16000);
  EXPECT_GT(status.nodes(1).worker().samples_per_s(), 0);
  EXPECT_GT(status.nodes(2).worker().samples_per_s(), status.nodes(1).worker().samples_per_s())
      << "worker 1 trains three times the samples";
  EXPECT_NEAR(status.nodes(1).worker().samples_per_s() + status.nodes(2).worker().samples_per_s(),
              status.samples_per_s(), 1e-6)
      << "the job's rate is the sum of the workers' shown";
  EXPECT_FALSE(status.nodes(0).has_worker()) << "servers get no worker rate";

  progress.Stopped(1);
  v1::StatusResponse after;
  *after.add_nodes() = status.nodes(2);
  progress.FillStatus(&after);
  EXPECT_EQ(after.nodes(0).worker().samples_per_s(), 0) << "a dead worker trains nothing";
}

}  // namespace
}  // namespace ecps
