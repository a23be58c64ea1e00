// CoordinatorLoop: failure detection keeps its schedule while a slow cluster operation (a
// checkpoint) runs, and the operations run in order. Fake clock for the detector; the loop's
// own tick is real (1 ms), and every wait has a deadline.
#include "coordinator/coordinator_loop.h"

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "coordinator/coordinator_test_util.h"
#include "gtest/gtest.h"
#include "proto/ecps.pb.h"

namespace ecps {
namespace {

using testing::ServerHeartbeat;
using testing::ServerRegistration;
using testing::TestSpec;
using testing::WorkerHeartbeat;
using testing::WorkerRegistration;

constexpr absl::Duration kTick = absl::Milliseconds(1);
constexpr absl::Duration kDeadline = absl::Seconds(30);  // generous: a loaded test machine

class CoordinatorLoopTest : public testing::CoordinatorServiceFixture {
 protected:
  // Registers servers s0.. (ACTIVE) and workers w0..; the job runs.
  void Start(int servers, int workers) {
    for (int i = 0; i < servers; ++i) Register(ServerRegistration(i, absl::StrCat("s", i)));
    for (int i = 0; i < servers; ++i) Beat(ServerHeartbeat(i, absl::StrCat("s", i)));
    for (int i = 0; i < workers; ++i) Register(WorkerRegistration(i, absl::StrCat("w", i)));
    ASSERT_EQ(service_->phase(), v1::JOB_RUNNING);
  }

  // Waits until the job's phase is `phase` (or the deadline passes); returns the last phase.
  v1::JobPhase WaitForPhase(v1::JobPhase phase) {
    const absl::Time deadline = absl::Now() + kDeadline;
    v1::JobPhase now = service_->phase();
    while (now != phase && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(1));  // polling a condition, bounded by the deadline
      now = service_->phase();
    }
    return now;
  }

  v1::NodeState StateOf(v1::Role role, int id) {
    const v1::StatusResponse status = Status();
    for (const v1::NodeInfo& node : status.nodes()) {
      if (node.role() == role && node.id() == id) return node.state();
    }
    return v1::NODE_STATE_UNSPECIFIED;
  }
};

// The point of the two threads: before, Tick ran after the periodic save returned, so a server
// that died during a save was declared dead only once the save was over.
TEST_F(CoordinatorLoopTest, DetectsADeathWhileACheckpointIsBeingSaved) {
  JobSpec spec = TestSpec(2, 1);
  spec.fault_tolerance.mode = FaultToleranceMode::kCheckpoint;
  spec.fault_tolerance.checkpoint.interval_steps = 10;
  ASSERT_NO_FATAL_FAILURE(MakeService(spec));
  absl::Notification saving;   // the checkpointer was entered
  absl::Notification release;  // lets it return
  std::atomic<bool> saved{false};
  service_->SetCheckpointer(
      [&](const v1::ClusterMap&, const std::function<CheckpointProgress()>& progress) {
        v1::CheckpointReport report;
        report.set_step(progress().step);
        if (!saving.HasBeenNotified()) saving.Notify();
        release.WaitForNotification();
        report.set_done(true);
        saved = true;
        return report;
      });
  absl::Notification declared;
  std::atomic<int> dead_server{-1};
  service_->SetServerDeadHandler([&](int id) {
    dead_server = id;
    if (!declared.HasBeenNotified()) declared.Notify();
    return true;
  });
  Start(2, 1);
  Beat(WorkerHeartbeat(0, "w0", 5));

  CoordinatorLoop loop(service_.get(), kTick);
  // The first periodic checkpoint starts as soon as the job runs, and blocks.
  const bool started = saving.WaitForNotificationWithTimeout(kDeadline);
  // s1 stops heartbeating; s0 and w0 go on (never silent for more than 1 s of the 1.5 s
  // timeout, whenever the loop's Tick runs). s1 is 2 s silent after the second step.
  for (int i = 0; i < 2; ++i) {
    clock_.Advance(absl::Milliseconds(1000));
    Beat(ServerHeartbeat(0, "s0"));
    Beat(WorkerHeartbeat(0, "w0", 5));
  }
  const bool detected = declared.WaitForNotificationWithTimeout(kDeadline);
  const bool still_saving = !saved.load();
  release.Notify();
  loop.Stop();

  ASSERT_TRUE(started) << "no periodic checkpoint started";
  EXPECT_TRUE(detected) << "server 1 was not declared dead while the checkpoint was being saved";
  EXPECT_TRUE(still_saving) << "the death was declared only after the save returned";
  EXPECT_EQ(dead_server.load(), 1);
  EXPECT_EQ(StateOf(v1::ROLE_SERVER, 1), v1::NODE_DEAD);
  EXPECT_EQ(StateOf(v1::ROLE_SERVER, 0), v1::NODE_ACTIVE);
  EXPECT_TRUE(saved.load()) << "Stop returns once the save in progress is over";
}

// The operations thread runs what is pending in order: the final checkpoint, then the final
// scrub, and the job finishes.
TEST_F(CoordinatorLoopTest, RunsTheFinalCheckpointThenTheFinalScrub) {
  JobSpec spec = TestSpec(2, 1);
  spec.fault_tolerance.mode = FaultToleranceMode::kReplication;
  spec.fault_tolerance.r = 1;
  ASSERT_NO_FATAL_FAILURE(MakeService(spec));
  std::mutex mu;
  std::vector<std::string> done;  // guarded by mu
  service_->SetCheckpointer(
      [&](const v1::ClusterMap&, const std::function<CheckpointProgress()>& progress) {
        v1::CheckpointReport report;
        report.set_step(progress().step);
        report.set_done(true);
        std::lock_guard<std::mutex> lock(mu);
        done.push_back("checkpoint");
        return report;
      });
  service_->SetScrubber([&](const v1::ClusterMap&) {
    v1::ScrubReport report;
    report.set_done(true);
    report.set_clean(true);
    std::lock_guard<std::mutex> lock(mu);
    done.push_back("scrub");
    return report;
  });
  Start(2, 1);
  CoordinatorLoop loop(service_.get(), kTick);
  Beat(WorkerHeartbeat(0, "w0", 100, /*done=*/true));
  EXPECT_EQ(WaitForPhase(v1::JOB_FINISHED), v1::JOB_FINISHED) << service_->error();
  loop.Stop();
  loop.Stop();  // idempotent
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(done, (std::vector<std::string>{"checkpoint", "scrub"}));
}

}  // namespace
}  // namespace ecps
