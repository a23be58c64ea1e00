#include "worker/worker_lifecycle.h"

#include <atomic>
#include <chrono>

#include "gtest/gtest.h"
#include "runtime/fake_coordinator_link.h"

namespace ecps {
namespace {

using ::ecps::testing::FakeCoordinatorLink;
using From = ResumePlan::From;

v1::WorkerProgress Progress(int64_t step, int64_t position) {
  v1::WorkerProgress p;
  p.set_step(step);
  p.set_reader_position(position);
  return p;
}

ResumeInputs Inputs(int worker_id = 1, int workers = 3) {
  ResumeInputs in;
  in.workers = workers;
  in.worker_id = worker_id;
  in.batch_size = 100;
  in.positions_count_batches = true;
  return in;
}

TEST(OwnStepTest, WholeBatchPositionsGiveTheWorkersOwnStep) {
  struct Case {
    int64_t step, position, batch;
    bool count_batches;
    int64_t want;
  };
  const Case cases[] = {
      {5, 700, 100, true, 7},    // ahead of the checkpoint's step
      {5, 750, 100, true, 5},    // not a whole number of batches
      {5, 0, 100, true, 5},      // nothing read
      {5, 700, 100, false, 5},   // positions do not count batches (files)
  };
  for (const Case& c : cases) {
    EXPECT_EQ(OwnStep(c.step, c.position, c.batch, c.count_batches), c.want)
        << c.step << " " << c.position << " " << c.batch << " " << c.count_batches;
  }
}

TEST(PlanResumeTest, AFreshJobStartsAtTheBeginning) {
  const ResumePlan plan = PlanResume(Inputs());
  EXPECT_EQ(plan.from, From::kStart);
  EXPECT_FALSE(plan.resume);
  EXPECT_EQ(plan.step, 0);
  EXPECT_EQ(plan.position, 0);
}

TEST(PlanResumeTest, AReplacementContinuesFromTheDeadWorkersProgress) {
  for (const auto& [step, position] : {std::pair<int64_t, int64_t>{12, 1300}, {0, 40}, {3, 0}}) {
    ResumeInputs in = Inputs();
    in.registered = Progress(step, position);
    // A replacement ignores the checkpoint: its predecessor was past it.
    in.checkpoint = CheckpointResumePoint{2, {100, 200, 300}};
    const ResumePlan plan = PlanResume(in);
    EXPECT_EQ(plan.from, From::kReplacement);
    EXPECT_TRUE(plan.resume);
    EXPECT_EQ(plan.step, step);  // no own-step arithmetic: the progress is its own
    EXPECT_EQ(plan.position, position);
  }
}

TEST(PlanResumeTest, ACheckpointOfAsManyWorkersGivesEachItsPosition) {
  ResumeInputs in = Inputs(/*worker_id=*/1);
  in.checkpoint = CheckpointResumePoint{5, {500, 800, 550}};
  ResumePlan plan = PlanResume(in);
  EXPECT_EQ(plan.from, From::kCheckpoint);
  EXPECT_TRUE(plan.resume);
  EXPECT_EQ(plan.position, 800);
  EXPECT_EQ(plan.step, 8);  // worker 1 was ahead of the slowest worker's step 5

  in.worker_id = 2;  // 550 is not whole batches: the checkpoint's step
  plan = PlanResume(in);
  EXPECT_EQ(plan.position, 550);
  EXPECT_EQ(plan.step, 5);

  in.positions_count_batches = false;
  in.worker_id = 1;
  plan = PlanResume(in);
  EXPECT_EQ(plan.position, 800);
  EXPECT_EQ(plan.step, 5);
}

TEST(PlanResumeTest, ACheckpointOfAnotherWorkerCountRestartsEveryPartition) {
  ResumeInputs in = Inputs(/*worker_id=*/0, /*workers=*/3);
  in.checkpoint = CheckpointResumePoint{5, {500, 800}};
  const ResumePlan plan = PlanResume(in);
  EXPECT_EQ(plan.from, From::kCheckpointRepartitioned);
  EXPECT_TRUE(plan.resume);
  EXPECT_EQ(plan.step, 5);
  EXPECT_EQ(plan.position, 0);
}

TEST(PlanRollbackResumeTest, RewindsToTheCheckpointsPosition) {
  v1::Rollback target;
  target.set_step(4);
  target.set_reader_position(600);
  ResumePlan plan = PlanRollbackResume(target, 100, true);
  EXPECT_TRUE(plan.resume);
  EXPECT_EQ(plan.step, 6);
  EXPECT_EQ(plan.position, 600);
  target.set_reader_position(-1);  // another worker count: from the partition's beginning
  plan = PlanRollbackResume(target, 100, true);
  EXPECT_EQ(plan.step, 4);
  EXPECT_EQ(plan.position, 0);
}

v1::Rollback RollbackOf(uint64_t generation, bool ready, int64_t step = 0) {
  v1::Rollback r;
  r.set_generation(generation);
  r.set_ready(ready);
  r.set_step(step);
  return r;
}

// The board dates its count: how long before each snapshot it was reached, which is what
// the coordinator's rates are taken from (coordinator/job_progress.h).
TEST(ProgressBoardTest, SnapshotsSayHowLongAgoTheCountWasReached) {
  FakeClock clock;
  ProgressBoard board(&clock);
  clock.Advance(absl::Milliseconds(5000));  // start-up: tables, the map
  board.TrainingStarts();
  clock.Advance(absl::Milliseconds(250));
  EXPECT_DOUBLE_EQ(board.Snapshot().samples_age_s(), 0.25) << "since training started";
  board.Step(1, 512, 0.5, 512, 0);
  clock.Advance(absl::Milliseconds(30));
  board.Step(2, 1024, 0.5, 1024, 0);
  clock.Advance(absl::Milliseconds(10));
  v1::WorkerProgress p = board.Snapshot();
  EXPECT_EQ(p.samples(), 1024);
  EXPECT_DOUBLE_EQ(p.samples_age_s(), 0.010) << "since step 2";
  clock.Advance(absl::Milliseconds(500));  // no step: the count stands, its age grows
  EXPECT_DOUBLE_EQ(board.Snapshot().samples_age_s(), 0.510);
  board.Rewind(/*generation=*/1, /*step=*/1, /*position=*/512);
  clock.Advance(absl::Milliseconds(40));
  EXPECT_DOUBLE_EQ(board.Snapshot().samples_age_s(), 0.040) << "since the rewind";
}

TEST(RollbackTrackerTest, NoRollbackDoesNothing) {
  RollbackTracker tracker;
  EXPECT_FALSE(tracker.Observe(v1::Rollback(), true));
  EXPECT_FALSE(tracker.pending());
  EXPECT_FALSE(tracker.halt()->load());
}

TEST(RollbackTrackerTest, ARollbackHaltsTrainingUntilItIsReady) {
  RollbackTracker tracker;
  EXPECT_FALSE(tracker.Observe(RollbackOf(1, false), false));
  EXPECT_TRUE(tracker.pending());
  EXPECT_TRUE(tracker.halt()->load());
  uint64_t generation = tracker.wanted();
  EXPECT_FALSE(tracker.TakeReady(&generation).has_value());
  EXPECT_TRUE(tracker.halt()->load());

  tracker.Observe(RollbackOf(1, true, 9), false);
  auto target = tracker.TakeReady(&generation);
  ASSERT_TRUE(target.has_value());
  EXPECT_EQ(target->step(), 9);
  EXPECT_FALSE(tracker.pending());
  EXPECT_FALSE(tracker.halt()->load());
}

TEST(RollbackTrackerTest, ALaterRollbackWhilePausedIsWaitedFor) {
  RollbackTracker tracker;
  tracker.Observe(RollbackOf(1, false), false);
  uint64_t generation = tracker.wanted();
  tracker.Observe(RollbackOf(2, false), false);
  EXPECT_FALSE(tracker.TakeReady(&generation).has_value());
  EXPECT_EQ(generation, 2u);
  tracker.Observe(RollbackOf(2, true, 3), false);
  auto target = tracker.TakeReady(&generation);
  ASSERT_TRUE(target.has_value());
  EXPECT_EQ(target->generation(), 2u);
}

TEST(RollbackTrackerTest, ARollbackOverBeforeTheFirstResponseIsHandled) {
  RollbackTracker tracker;
  EXPECT_TRUE(tracker.Observe(RollbackOf(3, true), true));
  EXPECT_FALSE(tracker.pending());
  EXPECT_FALSE(tracker.halt()->load());
  // The same rollback seen later (not the first response) is not new.
  EXPECT_FALSE(tracker.Observe(RollbackOf(3, true), false));
  EXPECT_FALSE(tracker.pending());
}

TEST(RollbackTrackerTest, ARollbackNotReadyAtTheFirstResponseHalts) {
  RollbackTracker tracker;
  EXPECT_FALSE(tracker.Observe(RollbackOf(3, false), true));
  EXPECT_TRUE(tracker.pending());
  EXPECT_TRUE(tracker.halt()->load());
}

class WorkerLifecycleTest : public ::testing::Test {
 protected:
  WorkerLifecycleTest() {
    options_.spec.cluster.workers = 2;
    options_.spec.data.batch_size = 10;
    options_.coordinator = "coord:7000";
    options_.token = "token";
    options_.id = 1;
  }

  WorkerOptions options_;
  FakeCoordinatorLink coordinator_;
  std::atomic<bool> stop_{false};
};

TEST_F(WorkerLifecycleTest, RegisterErrorNamesTheCoordinator) {
  coordinator_.SetRegistration(absl::UnavailableError("connection refused"));
  WorkerLifecycle life(options_, "w", &coordinator_, &stop_);
  auto registered = life.Register();
  ASSERT_FALSE(registered.ok());
  EXPECT_NE(registered.status().message().find("coord:7000"), std::string::npos);
  const auto sent = coordinator_.registrations();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].role(), v1::ROLE_WORKER);
  EXPECT_EQ(sent[0].requested_id(), 1);
  EXPECT_EQ(sent[0].instance(), "w");
}

TEST_F(WorkerLifecycleTest, AReplacementShowsItsPredecessorsProgress) {
  WorkerLifecycle life(options_, "w", &coordinator_, &stop_);
  v1::RegisterResponse registered;
  *registered.mutable_resume() = Progress(7, 70);
  registered.mutable_resume()->set_samples(140);
  ASSERT_TRUE(life.PlanStart(registered).ok());
  EXPECT_EQ(life.plan().from, From::kReplacement);
  const v1::WorkerProgress shown = life.board()->Snapshot();
  EXPECT_EQ(shown.step(), 7);
  EXPECT_EQ(shown.reader_position(), 70);
  EXPECT_EQ(shown.samples(), 140);
}

TEST_F(WorkerLifecycleTest, AMissingCheckpointCannotBeResumedFrom) {
  options_.spec.job.resume_from = "no/such/checkpoint/dir";
  WorkerLifecycle life(options_, "w", &coordinator_, &stop_);
  const absl::Status planned = life.PlanStart(v1::RegisterResponse());
  ASSERT_FALSE(planned.ok());
  EXPECT_NE(planned.message().find("cannot resume"), std::string::npos) << planned;
}

TEST_F(WorkerLifecycleTest, HeartbeatsCarryProgressAndEndWithTheJob) {
  WorkerLifecycle life(options_, "w", &coordinator_, &stop_);
  life.board()->Step(3, 30, 0.5, 30, 0);
  v1::HeartbeatResponse running;
  running.set_phase(v1::JOB_RUNNING);
  coordinator_.QueueHeartbeatResponse(running);
  EXPECT_EQ(life.Heartbeat(), WorkerHeartbeatAction::kContinue);
  EXPECT_TRUE(life.heartbeating());
  v1::HeartbeatResponse finished;
  finished.set_phase(v1::JOB_FINISHED);
  coordinator_.QueueHeartbeatResponse(finished);
  life.Heartbeat();
  EXPECT_EQ(life.exit_code(), 0);
  EXPECT_FALSE(stop_.load());
  const auto sent = coordinator_.heartbeats();
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].role(), v1::ROLE_WORKER);
  EXPECT_EQ(sent[0].id(), 1);
  EXPECT_EQ(sent[0].instance(), "w");
  EXPECT_EQ(sent[0].state(), v1::NODE_ACTIVE);
  EXPECT_EQ(sent[0].worker().step(), 3);
  EXPECT_EQ(sent[0].header().sender(), "worker-1");
}

// The coordinator gone: the worker trains on (stop stays down) through failed heartbeats,
// which back off; a whole grace with no answer stops it with exit code 1, saying why.
TEST_F(WorkerLifecycleTest, WithoutTheCoordinatorTrainingGoesOnUntilTheGraceEnds) {
  options_.spec.cluster.heartbeat_interval_ms = 100;
  options_.spec.cluster.coordinator_grace_s = 3;
  WorkerLifecycle life(options_, "w", &coordinator_, &stop_);
  const auto t0 = std::chrono::steady_clock::now();
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(life.Heartbeat(t0 + std::chrono::seconds(s)), WorkerHeartbeatAction::kContinue);
    EXPECT_FALSE(stop_.load()) << "stopped " << s << " s without the coordinator";
  }
  EXPECT_EQ(life.NextHeartbeatWait(), std::chrono::milliseconds(800));
  EXPECT_TRUE(life.heartbeating());
  EXPECT_EQ(life.Heartbeat(t0 + std::chrono::seconds(3)), WorkerHeartbeatAction::kCoordinatorLost);
  EXPECT_TRUE(stop_.load());
  EXPECT_EQ(life.exit_code(), 1);
  EXPECT_NE(life.lost_message().find("worker-1: no answer from the coordinator at coord:7000"),
            std::string::npos)
      << life.lost_message();
}

TEST_F(WorkerLifecycleTest, AFencedWorkerOrAFailedJobStopsWithExitOne) {
  v1::HeartbeatResponse fenced;
  fenced.set_fenced(true);
  v1::HeartbeatResponse failed;
  failed.set_phase(v1::JOB_FAILED);
  for (const v1::HeartbeatResponse& response : {fenced, failed}) {
    stop_.store(false);
    WorkerLifecycle life(options_, "w", &coordinator_, &stop_);
    coordinator_.QueueHeartbeatResponse(response);
    life.Heartbeat();
    EXPECT_EQ(life.exit_code(), 1) << response.DebugString();
    EXPECT_TRUE(stop_.load());
    EXPECT_TRUE(life.rollbacks()->halt()->load());
  }
}

TEST_F(WorkerLifecycleTest, ASignalEndsHeartbeatsWithExitOne) {
  WorkerLifecycle life(options_, "w", &coordinator_, &stop_);
  stop_.store(true);
  life.Heartbeat();  // fails (nothing queued), but the stop is seen
  EXPECT_EQ(life.exit_code(), 1);
  EXPECT_TRUE(life.rollbacks()->halt()->load());
}

TEST_F(WorkerLifecycleTest, AKillIsReturnedBeforeAnythingElse) {
  WorkerLifecycle life(options_, "w", &coordinator_, &stop_);
  v1::HeartbeatResponse kill;
  kill.set_kill(true);
  kill.set_phase(v1::JOB_FINISHED);
  coordinator_.QueueHeartbeatResponse(kill);
  EXPECT_EQ(life.Heartbeat(), WorkerHeartbeatAction::kKill);
  EXPECT_TRUE(life.heartbeating());
}

TEST_F(WorkerLifecycleTest, ARollbackOverAtStartIsReportedResumed) {
  WorkerLifecycle life(options_, "w", &coordinator_, &stop_);
  v1::HeartbeatResponse response;
  *response.mutable_rollback() = RollbackOf(2, true);
  coordinator_.QueueHeartbeatResponse(response);
  life.Heartbeat();
  EXPECT_FALSE(life.rollbacks()->pending());
  EXPECT_EQ(life.board()->Snapshot().resumed_generation(), 2u);
}

TEST_F(WorkerLifecycleTest, AwaitRollbackRewindsTheBoardAndThePlan) {
  options_.spec.data.source = DataSourceType::kSynthetic;
  WorkerLifecycle life(options_, "w", &coordinator_, &stop_);
  v1::HeartbeatResponse halted;
  *halted.mutable_rollback() = RollbackOf(1, false);
  coordinator_.QueueHeartbeatResponse(halted);
  v1::HeartbeatResponse ready;
  *ready.mutable_rollback() = RollbackOf(1, true, 2);
  ready.mutable_rollback()->set_reader_position(40);
  coordinator_.QueueHeartbeatResponse(ready);
  life.Heartbeat();
  life.Heartbeat();  // the rollback is ready before the worker waits: no wait needed
  ASSERT_TRUE(life.AwaitRollback(life.rollbacks()->wanted()).ok());
  EXPECT_TRUE(life.plan().resume);
  EXPECT_EQ(life.plan().step, 4);  // 40 / batch 10
  EXPECT_EQ(life.plan().position, 40);
  const v1::WorkerProgress shown = life.board()->Snapshot();
  EXPECT_EQ(shown.resumed_generation(), 1u);
  EXPECT_EQ(shown.paused_generation(), 1u);
  EXPECT_EQ(shown.step(), 4);
  EXPECT_FALSE(life.rollbacks()->halt()->load());
}

TEST_F(WorkerLifecycleTest, AwaitRollbackStopsOnASignal) {
  WorkerLifecycle life(options_, "w", &coordinator_, &stop_);
  stop_.store(true);
  EXPECT_TRUE(absl::IsCancelled(life.AwaitRollback(1)));
}

TEST_F(WorkerLifecycleTest, FinishKeepsTheCoordinatorsExitCode) {
  WorkerLifecycle life(options_, "w", &coordinator_, &stop_);
  v1::HeartbeatResponse failed;
  failed.set_phase(v1::JOB_FAILED);
  coordinator_.QueueHeartbeatResponse(failed);
  life.Heartbeat();
  life.Finish(absl::OkStatus(), 0);
  EXPECT_EQ(life.exit_code(), 1);
  EXPECT_TRUE(life.board()->Snapshot().done());
}

TEST_F(WorkerLifecycleTest, FinishWithoutAnAnswerDecidesFromTraining) {
  WorkerLifecycle trained(options_, "w", &coordinator_, &stop_);
  trained.Finish(absl::OkStatus(), 0);
  EXPECT_EQ(trained.exit_code(), 0);
  WorkerLifecycle broken(options_, "w", &coordinator_, &stop_);
  broken.Finish(absl::InternalError("boom"), 0);
  EXPECT_EQ(broken.exit_code(), 1);
  EXPECT_NE(broken.board()->Snapshot().error().find("boom"), std::string::npos);
}

}  // namespace
}  // namespace ecps
