// Recovery in the coordinator (fake clock, no network): spare promotion, the RECOVERING
// phase, replacement processes, worker failover with its resume point, admin kill, and the
// failure history.
#include <atomic>

#include "coordinator/coordinator_service.h"
#include "coordinator/coordinator_test_util.h"
#include "coordinator/failure_history.h"
#include "gtest/gtest.h"
#include "proto/coordinator_state.pb.h"
#include "proto/ecps.pb.h"

namespace ecps {
namespace {

using testing::FailureReport;
using testing::CaptureState;
using testing::kToken;
using testing::ServerHeartbeat;
using testing::ServerRegistration;
using testing::StatusQuery;
using testing::TestSpec;
using testing::WorkerHeartbeat;
using testing::WorkerRegistration;

constexpr absl::Duration kTimeout = absl::Milliseconds(1500);

class RecoveryTest : public testing::CoordinatorServiceFixture {
 protected:
  // An erasure_code (2, 1) job on `servers` servers with `spares` spares registered; the dead
  // server handler is the one coordinator_main installs.
  void StartJob(int servers, int spares, int workers) {
    spec_ = TestSpec(servers, workers);
    spec_.fault_tolerance.mode = FaultToleranceMode::kErasureCode;
    spec_.fault_tolerance.k = 2;
    spec_.fault_tolerance.r = 1;
    spec_.cluster.spares = spares;
    spec_.model.embedding_dim = 16;
    spec_.optimizer.sparse.type = SparseOptimizerType::kAdagrad;
    ASSERT_NO_FATAL_FAILURE(NewService());
    servers_ = servers;
    workers_ = workers;
    for (int i = 0; i < servers; ++i) Register(ServerRegistration(i, absl::StrCat("s", i)));
    for (int i = 0; i < spares; ++i) {
      v1::RegisterRequest spare = ServerRegistration(-1, absl::StrCat("spare", i));
      spare.set_pid(5000 + i);
      ASSERT_EQ(Register(spare).state(), v1::NODE_STANDBY);
    }
    for (int i = 0; i < servers; ++i) Beat(ServerHeartbeat(i, absl::StrCat("s", i)));
    for (int i = 0; i < workers; ++i) Register(WorkerRegistration(i, absl::StrCat("w", i)));
    ASSERT_EQ(service_->phase(), v1::JOB_RUNNING);
  }

  // A coordinator for spec_ with the handlers coordinator_main installs (`options`: a probe).
  void NewService(CoordinatorServiceOptions options = {}) {
    ASSERT_NO_FATAL_FAILURE(MakeService(spec_, std::move(options)));
    CoordinatorService* svc = service_.get();
    service_->SetServerDeadHandler([svc](int id) {
      svc->ReplaceServer(id);
      return true;
    });
    service_->SetScrubber([this](const v1::ClusterMap&) {
      ++scrubs_;
      v1::ScrubReport report;
      report.set_done(true);
      report.set_clean(true);
      return report;
    });
  }

  // Lets `silent` miss the heartbeat deadline while every instance in `alive` heartbeats.
  void Silence(const std::vector<v1::HeartbeatRequest>& alive) {
    clock_.Advance(kTimeout + absl::Milliseconds(1));
    for (const auto& hb : alive) Beat(hb);
    service_->Tick();
  }
  std::vector<v1::HeartbeatRequest> Everyone(const std::string& except) {
    std::vector<v1::HeartbeatRequest> all;
    for (int i = 0; i < servers_; ++i) {
      if (absl::StrCat("s", i) != except) all.push_back(ServerHeartbeat(i, absl::StrCat("s", i)));
    }
    for (int i = 0; i < workers_; ++i) {
      if (absl::StrCat("w", i) != except) {
        all.push_back(WorkerHeartbeat(i, absl::StrCat("w", i), 5));
      }
    }
    return all;
  }

  JobSpec spec_;
  int servers_ = 0;
  int workers_ = 0;
  std::atomic<int> scrubs_{0};
};

TEST_F(RecoveryTest, DeadServerIsReplacedByASpareAtOnceAndRecovers) {
  StartJob(3, 1, 1);
  std::vector<v1::HeartbeatRequest> alive = Everyone("s1");
  v1::HeartbeatRequest spare_beat = ServerHeartbeat(-1, "spare0", v1::NODE_STANDBY);
  alive.push_back(spare_beat);
  Silence(alive);

  v1::ClusterMap map;
  service_->GetClusterMap(&map);
  EXPECT_EQ(map.epoch(), 3u) << "death and promotion each bump the epoch";
  EXPECT_EQ(map.servers(1).instance(), "spare0") << "the spare learns its id from the map";
  EXPECT_EQ(map.servers(1).state(), v1::NODE_RECOVERING);
  EXPECT_EQ(map.servers(1).pid(), 5000);
  EXPECT_EQ(service_->phase(), v1::JOB_RECOVERING);
  EXPECT_TRUE(Beat(ServerHeartbeat(1, "s1")).fenced()) << "the old instance is fenced";

  // The spare heartbeats as before (STANDBY, id -1) until it notices: it stays RECOVERING.
  v1::HeartbeatResponse hb = Beat(spare_beat);
  EXPECT_FALSE(hb.fenced());
  service_->GetClusterMap(&map);
  EXPECT_EQ(map.servers(1).state(), v1::NODE_RECOVERING);

  // Rebuild progress shows in Status and the failure history.
  v1::HeartbeatRequest rebuilding = ServerHeartbeat(1, "spare0", v1::NODE_RECOVERING);
  rebuilding.mutable_server()->set_rebuild_rows_done(450);
  rebuilding.mutable_server()->set_rebuild_rows_total(1000);
  rebuilding.mutable_server()->set_on_demand_rebuilds(120);
  rebuilding.mutable_server()->set_rebuild_rows_per_s(900);
  clock_.Advance(absl::Milliseconds(500));
  Beat(rebuilding);
  v1::StatusResponse st = Status();
  ASSERT_EQ(st.failures_size(), 1);
  EXPECT_EQ(st.failures(0).state(), v1::FAILURE_REPLACING);
  EXPECT_EQ(st.failures(0).rows_rebuilt(), 450);
  EXPECT_EQ(st.failures(0).on_demand_rebuilds(), 120);
  EXPECT_TRUE(st.failures(0).by_spare());
  EXPECT_EQ(st.failures(0).replacement(), "spare0");

  clock_.Advance(absl::Milliseconds(1500));
  rebuilding.set_state(v1::NODE_ACTIVE);
  rebuilding.mutable_server()->set_rebuild_rows_done(1000);
  EXPECT_EQ(Beat(rebuilding).phase(), v1::JOB_RUNNING);
  st = Status();
  const v1::FailureEvent& e = st.failures(0);
  EXPECT_EQ(e.state(), v1::FAILURE_RECOVERED);
  EXPECT_EQ(e.role(), v1::ROLE_SERVER);
  EXPECT_EQ(e.id(), 1);
  EXPECT_EQ(e.instance(), "s1");
  EXPECT_EQ(e.pid(), 1001);
  EXPECT_NEAR(e.detection_s(), 1.501, 1e-6);
  EXPECT_NEAR(e.rebuild_s(), 2.0, 1e-6);
  EXPECT_NEAR(e.recovery_s(), 2.0, 1e-6);
  EXPECT_EQ(e.rows_rebuilt(), 1000);
  // 1000 rows of 16 weights + 16 accumulators (128 bytes) in 2 s.
  EXPECT_NEAR(e.rebuild_mb_s(), 1000 * 128 / 1e6 / 2.0, 1e-9);
}

TEST_F(RecoveryTest, WithoutASpareTheSlotWaitsForAReplacementProcess) {
  StartJob(3, 0, 1);
  Silence(Everyone("s2"));
  EXPECT_EQ(service_->phase(), v1::JOB_RECOVERING) << service_->error();
  v1::StatusResponse st = Status();
  ASSERT_EQ(st.failures_size(), 1);
  EXPECT_EQ(st.failures(0).state(), v1::FAILURE_DETECTED);
  EXPECT_EQ(service_->epoch(), 2u);

  v1::RegisterResponse reg = Register(ServerRegistration(2, "s2-new"));
  EXPECT_EQ(reg.state(), v1::NODE_RECOVERING);
  EXPECT_EQ(reg.map().epoch(), 3u);
  st = Status();
  EXPECT_EQ(st.failures(0).state(), v1::FAILURE_REPLACING);
  EXPECT_FALSE(st.failures(0).by_spare());
  EXPECT_EQ(st.failures(0).replacement(), "s2-new");
  EXPECT_EQ(service_->phase(), v1::JOB_RECOVERING);
  EXPECT_EQ(Beat(ServerHeartbeat(2, "s2-new", v1::NODE_ACTIVE)).phase(), v1::JOB_RUNNING);
  EXPECT_EQ(Status().failures(0).state(), v1::FAILURE_RECOVERED);
}

TEST_F(RecoveryTest, FinalScrubWaitsUntilNoServerRecovers) {
  StartJob(3, 0, 1);
  Silence(Everyone("s0"));
  ASSERT_EQ(service_->phase(), v1::JOB_RECOVERING);
  Beat(WorkerHeartbeat(0, "w0", 100, /*done=*/true));
  service_->RunPendingScrub();
  EXPECT_EQ(scrubs_.load(), 0) << "no scrub while server 0 is missing";
  EXPECT_EQ(service_->phase(), v1::JOB_RECOVERING);
  Register(ServerRegistration(0, "s0-new"));
  service_->RunPendingScrub();
  EXPECT_EQ(scrubs_.load(), 0) << "no scrub while server 0 rebuilds";
  Beat(ServerHeartbeat(0, "s0-new", v1::NODE_ACTIVE));
  service_->RunPendingScrub();
  EXPECT_EQ(scrubs_.load(), 1);
  EXPECT_EQ(service_->phase(), v1::JOB_FINISHED) << service_->error();
}

TEST_F(RecoveryTest, ASecondDeathTakesTheNextSpareAndADeadSpareIsSkipped) {
  StartJob(3, 2, 1);
  // spare0 dies first (silent); spare1 stays.
  std::vector<v1::HeartbeatRequest> alive = Everyone("s0");
  alive.push_back(ServerHeartbeat(-1, "spare1", v1::NODE_STANDBY));
  Silence(alive);
  v1::ClusterMap map;
  service_->GetClusterMap(&map);
  EXPECT_EQ(map.servers(0).instance(), "spare1");
  // The replacement dies during its recovery: no spare left, the slot waits.
  alive = Everyone("s0");
  Silence(alive);
  service_->GetClusterMap(&map);
  EXPECT_EQ(map.servers(0).state(), v1::NODE_DEAD);
  EXPECT_EQ(service_->phase(), v1::JOB_RECOVERING);
  Register(ServerRegistration(0, "s0-new"));
  Beat(ServerHeartbeat(0, "s0-new", v1::NODE_ACTIVE));
  EXPECT_EQ(service_->phase(), v1::JOB_RUNNING);
  v1::StatusResponse st = Status();
  ASSERT_EQ(st.failures_size(), 2) << "the original death and the replacement's";
  for (const v1::FailureEvent& e : st.failures()) {
    EXPECT_EQ(e.state(), v1::FAILURE_RECOVERED);
    EXPECT_EQ(e.replacement(), "s0-new");
  }
  EXPECT_EQ(st.failures(1).instance(), "spare1");
}

TEST_F(RecoveryTest, DeadWorkerIsReplacedAndResumesFromItsLastProgress) {
  StartJob(3, 0, 2);
  v1::HeartbeatRequest progress = WorkerHeartbeat(1, "w1", 40);
  progress.mutable_worker()->set_reader_position(40 * 256);
  progress.mutable_worker()->set_samples(40 * 256);
  Beat(progress);
  Silence(Everyone("w1"));
  EXPECT_EQ(service_->phase(), v1::JOB_RUNNING) << "a dead worker does not fail the job: "
                                                << service_->error();
  v1::StatusResponse st = Status();
  ASSERT_EQ(st.failures_size(), 1);
  EXPECT_EQ(st.failures(0).role(), v1::ROLE_WORKER);
  EXPECT_EQ(st.failures(0).state(), v1::FAILURE_DETECTED);
  EXPECT_EQ(st.step(), 5) << "the job's step is the slowest worker's";

  v1::RegisterResponse reg = Register(WorkerRegistration(1, "w1-new"));
  EXPECT_EQ(reg.id(), 1);
  EXPECT_EQ(reg.resume().step(), 40);
  EXPECT_EQ(reg.resume().reader_position(), 40 * 256);
  EXPECT_FALSE(reg.resume().done());
  EXPECT_EQ(Register(WorkerRegistration(1, "w1-new")).resume().step(), 40)
      << "a retried registration gets the same resume point";
  EXPECT_TRUE(Beat(WorkerHeartbeat(1, "w1", 41)).fenced());

  // Recovered once the replacement trains a step of its own.
  Beat(WorkerHeartbeat(1, "w1-new", 40));
  EXPECT_EQ(Status().failures(0).state(), v1::FAILURE_REPLACING);
  Beat(WorkerHeartbeat(1, "w1-new", 41));
  EXPECT_EQ(Status().failures(0).state(), v1::FAILURE_RECOVERED);

  // The job finishes when the replacement and the other worker are done.
  Beat(WorkerHeartbeat(0, "w0", 100, true));
  EXPECT_EQ(Beat(WorkerHeartbeat(1, "w1-new", 100, true)).phase(), v1::JOB_RUNNING)
      << "waits for the final scrub";
  service_->RunPendingScrub();
  EXPECT_EQ(service_->phase(), v1::JOB_FINISHED) << service_->error();
}

// worker.abft_max_detections: a worker that computes wrongly says so in its heartbeat and is
// declared dead at the next check, with no heartbeat timeout waited, and with its reason;
// its detections stay counted in the job's after its replacement starts from 0.
TEST_F(RecoveryTest, AnUnhealthyWorkerIsDeclaredDeadAtOnceWithItsReason) {
  StartJob(3, 0, 2);
  v1::HeartbeatRequest sick = WorkerHeartbeat(1, "w1", 40);
  sick.mutable_worker()->set_abft_detections(3);
  Beat(sick);
  service_->Tick();
  EXPECT_EQ(Status().failures_size(), 0) << "detections alone are no failure";
  EXPECT_EQ(Status().abft_detections(), 3);
  sick.mutable_worker()->set_unhealthy("worker 1 computes wrongly: 3 steps computed again");
  Beat(sick);
  service_->Tick();  // no time has passed: only the report declares it dead
  v1::StatusResponse st = Status();
  ASSERT_EQ(st.failures_size(), 1);
  EXPECT_EQ(st.failures(0).role(), v1::ROLE_WORKER);
  EXPECT_EQ(st.failures(0).reason(),
            "unhealthy: worker 1 computes wrongly: 3 steps computed again");
  EXPECT_EQ(service_->phase(), v1::JOB_RUNNING) << "not the job's failure: " << service_->error();
  EXPECT_TRUE(Beat(sick).fenced());
  EXPECT_EQ(Register(WorkerRegistration(1, "w1-new")).resume().step(), 40);
  v1::HeartbeatRequest fresh = WorkerHeartbeat(1, "w1-new", 41);
  fresh.mutable_worker()->set_abft_detections(1);
  Beat(fresh);
  EXPECT_EQ(Status().abft_detections(), 4) << "the dead instance's 3 and the replacement's 1";
}

TEST_F(RecoveryTest, KillFlagsTheHolderAndNamesItInTheFailure) {
  StartJob(3, 0, 1);
  v1::KillRequest kill;
  FillHeader(kill.mutable_header(), kToken, 0, "cli");
  kill.set_role(v1::ROLE_SERVER);
  kill.set_id(2);
  v1::KillResponse killed;
  ASSERT_TRUE(service_->Kill(kill, &killed).ok());
  EXPECT_EQ(killed.instance(), "s2");
  EXPECT_EQ(killed.pid(), 1002);
  EXPECT_TRUE(Beat(ServerHeartbeat(2, "s2")).kill());
  EXPECT_FALSE(Beat(ServerHeartbeat(1, "s1")).kill());
  Silence(Everyone("s2"));
  v1::StatusResponse st = Status();
  ASSERT_EQ(st.failures_size(), 1);
  EXPECT_NE(st.failures(0).reason().find("killed by ecps kill"), std::string::npos)
      << st.failures(0).reason();
  EXPECT_EQ(service_->Kill(kill, &killed).code(), absl::StatusCode::kFailedPrecondition)
      << "a dead slot has nobody to kill";

  v1::KillRequest bad = kill;
  FillHeader(bad.mutable_header(), "wrong", 0, "cli");
  EXPECT_EQ(service_->Kill(bad, &killed).code(), absl::StatusCode::kUnauthenticated);
  bad = kill;
  bad.set_id(9);
  EXPECT_EQ(service_->Kill(bad, &killed).code(), absl::StatusCode::kInvalidArgument);
}

TEST(FailureHistoryTest, RowPayloadBytesFollowsTheOptimizer) {
  EXPECT_EQ(RowPayloadBytes(16, SparseOptimizerType::kSgd), 64);
  EXPECT_EQ(RowPayloadBytes(16, SparseOptimizerType::kAdagrad), 128);
  EXPECT_EQ(RowPayloadBytes(16, SparseOptimizerType::kRowwiseAdagrad), 68);
}

// The coordinator is replaced, and a server was killed meanwhile: its peers report it and its
// port refuses connections, so the new coordinator declares it dead at once and promotes the
// spare. The spare, still backing off from the old coordinator, has not heartbeated the new
// one yet: it keeps the takeover's grace instead of getting a bare heartbeat timeout from its
// promotion on (which it would miss, and be declared dead while it rebuilds).
TEST_F(RecoveryTest, ASparePromotedRightAfterATakeoverKeepsTheTakeoversGrace) {
  StartJob(3, 1, 1);
  v1::CoordinatorState saved;
  ASSERT_TRUE(CaptureState(service_.get(), &saved).ok());
  clock_.Advance(absl::Seconds(5));  // the coordinator is down
  CoordinatorServiceOptions options;
  options.process_gone = [](const std::string& address) { return address == "127.0.0.1:7001"; };
  ASSERT_NO_FATAL_FAILURE(NewService(std::move(options)));
  ASSERT_TRUE(service_->Restore(saved).ok());
  v1::ReportFailureResponse reported;
  ASSERT_TRUE(service_->ReportFailure(FailureReport(v1::ROLE_SERVER, 1), &reported).ok());
  v1::ClusterMap map;
  service_->GetClusterMap(&map);
  ASSERT_EQ(map.servers(1).instance(), "spare0") << "promoted at once";
  const uint64_t epoch = map.epoch();

  // A heartbeat timeout later the others have heartbeated; the spare has not (its backoff).
  clock_.Advance(kTimeout + absl::Milliseconds(1));
  for (const auto& hb : Everyone("s1")) Beat(hb);
  service_->Tick();
  service_->GetClusterMap(&map);
  EXPECT_EQ(map.epoch(), epoch) << "the promoted spare was declared dead within its grace";
  EXPECT_EQ(map.servers(1).state(), v1::NODE_RECOVERING);
  EXPECT_FALSE(Beat(ServerHeartbeat(-1, "spare0", v1::NODE_STANDBY)).fenced());

  // Once the grace is over, it is held to the heartbeat timeout like everyone else.
  clock_.Advance(kTakeoverGrace + absl::Milliseconds(1));
  for (const auto& hb : Everyone("s1")) Beat(hb);
  service_->Tick();
  service_->GetClusterMap(&map);
  EXPECT_GT(map.epoch(), epoch);
  EXPECT_TRUE(Beat(ServerHeartbeat(1, "spare0", v1::NODE_RECOVERING)).fenced());
}

// Saving the state holds the lock every heartbeat needs: a save that takes 3 s (a slow disk's
// fsync, a slow etcd) is 3 s in which nobody could be heard, not 3 s of silence from every
// node. Before, the next tick declared them all dead and the job ended for data loss.
TEST_F(RecoveryTest, ASlowStateSaveDeclaresNobodyDead) {
  StartJob(3, 0, 1);
  bool slow = false;
  ASSERT_TRUE(service_
                  ->SetStateSaver([&](const v1::CoordinatorState&) {
                    if (slow) clock_.Advance(absl::Seconds(3));
                    return absl::OkStatus();
                  })
                  .ok());
  const uint64_t epoch = service_->epoch();
  for (const auto& hb : Everyone("")) Beat(hb);
  clock_.Advance(absl::Milliseconds(1100));
  slow = true;
  const absl::Time before = clock_.Now();
  service_->Tick();  // a second since the last save: it saves, and the clock moves on 3 s
  slow = false;
  ASSERT_EQ(clock_.Now() - before, absl::Seconds(3)) << "the tick did not save";
  service_->Tick();
  EXPECT_EQ(service_->epoch(), epoch) << "nodes declared dead for the coordinator's own save";
  EXPECT_EQ(Status().failures_size(), 0);

  // What comes after the save counts again: s1, silent on, is declared dead.
  clock_.Advance(kTimeout);
  for (const auto& hb : Everyone("s1")) Beat(hb);
  service_->Tick();
  EXPECT_GT(service_->epoch(), epoch);
  ASSERT_EQ(Status().failures_size(), 1);
  EXPECT_EQ(Status().failures(0).instance(), "s1");
}

// The same for a coordinator whose threads were not scheduled (CoordinatorLoop tells it how
// long its detection round was late).
TEST_F(RecoveryTest, AStalledCoordinatorDeclaresNobodyDead) {
  StartJob(3, 0, 1);
  const uint64_t epoch = service_->epoch();
  for (const auto& hb : Everyone("")) Beat(hb);
  clock_.Advance(absl::Seconds(4));
  service_->Stalled(absl::Seconds(3));
  service_->Tick();
  EXPECT_EQ(service_->epoch(), epoch);
  clock_.Advance(absl::Milliseconds(600));
  service_->Tick();
  EXPECT_GT(service_->epoch(), epoch) << "past the timeout once the stall is taken off";
}

}  // namespace
}  // namespace ecps
