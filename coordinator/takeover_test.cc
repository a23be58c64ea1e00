// A coordinator's state saved (SetStateSaver) and taken over by another (Restore): the same
// membership, epoch, failure history and progress, a raised term, and fresh heartbeat
// deadlines for the live nodes.
#include <functional>
#include <optional>

#include "coordinator/coordinator_service.h"
#include "coordinator/coordinator_test_util.h"
#include "gtest/gtest.h"
#include "proto/coordinator_state.pb.h"
#include "proto/ecps.pb.h"

namespace ecps {
namespace {

using testing::CaptureState;
using testing::kToken;
using testing::ServerHeartbeat;
using testing::ServerRegistration;
using testing::TestSpec;
using testing::WorkerHeartbeat;
using testing::WireRollback;
using testing::WorkerRegistration;

constexpr absl::Duration kTimeout = absl::Milliseconds(1500);  // TestSpec's heartbeat timeout

class TakeoverTest : public testing::CoordinatorServiceFixture {
 protected:
  // A 2-server, 2-worker job whose worker 1 died after worker 0 reported step 5, then
  // `then` (when given); the state as the service last saved it.
  v1::CoordinatorState RunAndSave(const std::function<void()>& then = nullptr) {
    MakeService(TestSpec(2, 2));
    v1::CoordinatorState saved;
    int saves = 0;
    EXPECT_TRUE(service_
                    ->SetStateSaver([&saved, &saves](const v1::CoordinatorState& state) {
                      saved = state;
                      ++saves;
                      return absl::OkStatus();
                    })
                    .ok());
    EXPECT_EQ(saves, 1) << "the saver saves at once";
    for (int i = 0; i < 2; ++i) Register(ServerRegistration(i, absl::StrCat("s", i)));
    for (int i = 0; i < 2; ++i) Beat(ServerHeartbeat(i, absl::StrCat("s", i)));
    for (int i = 0; i < 2; ++i) Register(WorkerRegistration(i, absl::StrCat("w", i)));
    EXPECT_EQ(service_->phase(), v1::JOB_RUNNING);
    clock_.Advance(kTimeout + absl::Milliseconds(1));
    Beat(ServerHeartbeat(0, "s0"));
    Beat(ServerHeartbeat(1, "s1"));
    Beat(WorkerHeartbeat(0, "w0", 5));
    service_->Tick();  // w1 is declared dead
    EXPECT_EQ(service_->epoch(), 2u);
    EXPECT_GT(saves, 4);
    if (then) then();
    // The service (and its saver's captures) go; `saved` is a copy.
    service_->SetStateSaver([](const v1::CoordinatorState&) { return absl::OkStatus(); })
        .IgnoreError();
    return saved;
  }
};

TEST_F(TakeoverTest, SavedStateHoldsMembershipEpochPhaseHistoryAndProgress) {
  const v1::CoordinatorState saved = RunAndSave();
  EXPECT_EQ(saved.term(), 1u);
  EXPECT_EQ(saved.epoch(), 2u);
  v1::ClusterMap map;
  service_->GetClusterMap(&map);
  EXPECT_EQ(map.term(), 1u) << "the first coordinator's maps";
  EXPECT_EQ(saved.phase(), v1::JOB_RUNNING);
  ASSERT_EQ(saved.servers_size(), 2);
  ASSERT_EQ(saved.workers_size(), 2);
  EXPECT_EQ(saved.servers(1).info().instance(), "s1");
  EXPECT_EQ(saved.servers(1).info().state(), v1::NODE_ACTIVE);
  EXPECT_EQ(saved.workers(1).info().state(), v1::NODE_DEAD);
  EXPECT_EQ(saved.workers(0).info().worker().step(), 5);
  EXPECT_EQ(saved.failures_size(), 1);
}

TEST_F(TakeoverTest, NewCoordinatorTakesOverAndKeepsTheLiveNodes) {
  const v1::CoordinatorState saved = RunAndSave();
  clock_.Advance(absl::Seconds(10));  // the old coordinator is down a while
  MakeService(TestSpec(2, 2));
  ASSERT_TRUE(service_->Restore(saved).ok());
  EXPECT_EQ(service_->term(), 2u);
  EXPECT_EQ(service_->epoch(), 2u);
  EXPECT_EQ(service_->phase(), v1::JOB_RUNNING);
  v1::StatusResponse status = Status();
  EXPECT_EQ(status.failures_size(), 1);
  bool found = false;
  for (const v1::NodeInfo& node : status.nodes()) {
    if (node.role() != v1::ROLE_WORKER || node.id() != 0) continue;
    found = true;
    EXPECT_EQ(node.instance(), "w0");
    EXPECT_EQ(node.worker().step(), 5) << "the worker's last progress";
  }
  EXPECT_TRUE(found);

  // Known instances' heartbeats are simply accepted; a retried registration gets its slot.
  const v1::HeartbeatResponse answer = Beat(ServerHeartbeat(0, "s0"));
  EXPECT_FALSE(answer.fenced());
  EXPECT_EQ(answer.term(), 2u) << "the nodes learn the new term";
  v1::ClusterMap map;
  service_->GetClusterMap(&map);
  EXPECT_EQ(map.term(), 2u) << "maps carry the term too";
  EXPECT_EQ(Register(ServerRegistration(0, "s0")).map().term(), 2u);
  EXPECT_FALSE(Beat(WorkerHeartbeat(0, "w0", 6)).fenced());
  EXPECT_EQ(Register(ServerRegistration(0, "s0")).id(), 0);
  EXPECT_TRUE(Beat(WorkerHeartbeat(1, "w1", 3)).fenced()) << "declared dead before the takeover";

  // s1 never comes back: it gets the heartbeat timeout and the grace from the takeover.
  clock_.Advance(kTimeout + kTakeoverGrace);
  Beat(ServerHeartbeat(0, "s0"));
  Beat(WorkerHeartbeat(0, "w0", 7));
  service_->Tick();
  EXPECT_EQ(service_->epoch(), 2u) << "not dead at exactly the timeout";
  clock_.Advance(absl::Milliseconds(1));
  service_->Tick();
  EXPECT_EQ(service_->epoch(), 3u) << "declared dead through the normal path";
  EXPECT_EQ(Status().failures_size(), 2);
}

// What the deposed coordinator had promised or shown is kept: an admin's kill not carried
// out yet (the node still dies at its next heartbeat) and the last scrub's report.
TEST_F(TakeoverTest, APendingKillAndTheLastScrubAreTakenOver) {
  const v1::CoordinatorState saved = RunAndSave([this] {
    service_->SetScrubber([](const v1::ClusterMap&) {
      v1::ScrubReport report;
      report.set_done(true);
      report.set_clean(true);
      report.set_stripes_checked(42);
      return report;
    });
    v1::ScrubRequest scrub;
    FillHeader(scrub.mutable_header(), kToken, 0, "cli");
    v1::ScrubReport report;
    ASSERT_TRUE(service_->Scrub(scrub, &report).ok());
    v1::KillRequest kill;
    FillHeader(kill.mutable_header(), kToken, 0, "cli");
    kill.set_role(v1::ROLE_SERVER);
    kill.set_id(1);
    v1::KillResponse killed;
    ASSERT_TRUE(service_->Kill(kill, &killed).ok());
  });
  EXPECT_EQ(saved.kill_requested_size(), 1);
  MakeService(TestSpec(2, 2));
  ASSERT_TRUE(service_->Restore(saved).ok());
  EXPECT_TRUE(Beat(ServerHeartbeat(1, "s1")).kill()) << "the kill asked of the deposed one";
  EXPECT_FALSE(Beat(ServerHeartbeat(0, "s0")).kill());
  EXPECT_EQ(Status().scrub().stripes_checked(), 42);
}

// Mode checkpoint: a rollback whose reload finished just before the coordinator died. The
// new one tells the worker where to resume, as the old one would have, instead of leaving it
// paused for good.
TEST_F(TakeoverTest, ARollbackInProgressIsTakenOver) {
  JobSpec spec = TestSpec(2, 1);
  spec.fault_tolerance.mode = FaultToleranceMode::kCheckpoint;
  spec.fault_tolerance.checkpoint.interval_steps = 10;
  MakeService(spec);
  v1::CoordinatorState saved;
  ASSERT_TRUE(CaptureState(service_.get(), &saved).ok());
  WireRollback(service_.get());
  Register(ServerRegistration(0, "s0"));
  Register(ServerRegistration(1, "s1"));
  Beat(ServerHeartbeat(0, "s0"));
  Beat(ServerHeartbeat(1, "s1"));
  Register(WorkerRegistration(0, "w0"));
  Beat(WorkerHeartbeat(0, "w0", 8));
  clock_.Advance(kTimeout + absl::Milliseconds(1));
  Beat(ServerHeartbeat(0, "s0"));
  Beat(WorkerHeartbeat(0, "w0", 8));
  service_->Tick();  // s1 is declared dead: rollback 1
  Register(ServerRegistration(1, "s1-new"));
  Beat(ServerHeartbeat(1, "s1-new"));
  v1::HeartbeatRequest paused = WorkerHeartbeat(0, "w0", 8);
  paused.mutable_worker()->set_paused_generation(1);
  Beat(paused);
  service_->RunPendingRollback();
  EXPECT_EQ(saved.rollback_generation(), 1u);
  EXPECT_TRUE(saved.rollback_reloaded());
  service_->SetStateSaver([](const v1::CoordinatorState&) { return absl::OkStatus(); })
      .IgnoreError();

  MakeService(spec);
  ASSERT_TRUE(service_->Restore(saved).ok());
  const v1::HeartbeatResponse answer = Beat(paused);
  EXPECT_EQ(answer.rollback().generation(), 1u);
  EXPECT_TRUE(answer.rollback().ready()) << "the servers reloaded before the takeover";
  EXPECT_EQ(answer.rollback().step(), 5);
  EXPECT_EQ(answer.rollback().reader_position(), 640);
}

TEST_F(TakeoverTest, StateOfAnotherShapeIsRefused) {
  const v1::CoordinatorState saved = RunAndSave();
  MakeService(TestSpec(3, 2));
  EXPECT_EQ(service_->Restore(saved).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(service_->term(), 1u);
}

}  // namespace
}  // namespace ecps
