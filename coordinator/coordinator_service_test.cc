// CoordinatorService through its public handlers, with a fake clock and no network: every
// scenario of the phase machine, failure handling and the map watch. Checkpoints and
// rollback are in coordinator_checkpoint_test.cc; the decisions themselves have their own
// table tests (job_phase_test.cc, job_steps_test.cc).
#include "coordinator/coordinator_service.h"

#include <atomic>
#include <deque>
#include <thread>

#include "coordinator/coordinator_test_util.h"
#include "gtest/gtest.h"
#include "proto/ecps.pb.h"

namespace ecps {
namespace {

using testing::FailureReport;
using testing::kToken;
using testing::ServerHeartbeat;
using testing::ServerRegistration;
using testing::StatusQuery;
using testing::TestSpec;
using testing::WorkerHeartbeat;
using testing::WorkerRegistration;

constexpr absl::Duration kTimeout = absl::Milliseconds(1500);  // TestSpec's heartbeat timeout

// Its helpers (Make, StartJob, BeatAllBut, NodeOf) are the fixture's: coordinator_test_util.h.
using CoordinatorServiceTest = testing::CoordinatorServiceFixture;

TEST_F(CoordinatorServiceTest, RejectsUnusableSpecs) {
  JobSpec spec = TestSpec(2, 1);
  spec.fault_tolerance.mode = FaultToleranceMode::kErasureCode;
  spec.fault_tolerance.k = 2;
  spec.fault_tolerance.r = 1;
  EXPECT_EQ(CoordinatorService::Create(spec, kToken, &clock_).status().code(),
            absl::StatusCode::kInvalidArgument)
      << "k + r > servers";
  spec = TestSpec(0, 1);
  EXPECT_FALSE(CoordinatorService::Create(spec, kToken, &clock_).ok());
}

TEST_F(CoordinatorServiceTest, WrongTokenIsUnauthenticatedAndChangesNothing) {
  Make(1, 1);
  v1::RegisterResponse reg;
  EXPECT_EQ(service_->Register(ServerRegistration(0, "s0", "wrong"), &reg).code(),
            absl::StatusCode::kUnauthenticated);
  v1::HeartbeatResponse hb;
  EXPECT_EQ(service_->Heartbeat(ServerHeartbeat(0, "s0", v1::NODE_ACTIVE, "wrong"), &hb).code(),
            absl::StatusCode::kUnauthenticated);
  v1::ReportFailureResponse rf;
  EXPECT_EQ(service_->ReportFailure(FailureReport(v1::ROLE_SERVER, 0, "wrong"), &rf).code(),
            absl::StatusCode::kUnauthenticated);
  v1::StatusResponse st;
  EXPECT_EQ(service_->Status(StatusQuery("wrong"), &st).code(), absl::StatusCode::kUnauthenticated);
  v1::WatchClusterMapRequest watch;
  FillHeader(watch.mutable_header(), "wrong", 0, "t");
  int sent = 0;
  EXPECT_EQ(service_
                ->WatchClusterMap(
                    watch, [] { return false; },
                    [&](const v1::ClusterMap&) {
                      ++sent;
                      return false;
                    })
                .code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(sent, 0);
  EXPECT_EQ(Status().nodes_size(), 0) << "nothing was registered";
}

TEST_F(CoordinatorServiceTest, PhasesRunFromStartingToFinished) {
  Make(2, 2);
  v1::RegisterResponse r0 = Register(ServerRegistration(0, "s0"));
  EXPECT_EQ(r0.id(), 0);
  EXPECT_EQ(r0.map().epoch(), 1u);
  EXPECT_EQ(r0.map().phase(), v1::JOB_STARTING);
  Register(ServerRegistration(1, "s1"));
  Register(WorkerRegistration(0, "w0"));
  Register(WorkerRegistration(1, "w1"));
  EXPECT_EQ(service_->phase(), v1::JOB_STARTING) << "servers are still STARTING";
  Beat(ServerHeartbeat(0, "s0"));
  EXPECT_EQ(Beat(ServerHeartbeat(1, "s1", v1::NODE_STARTING)).phase(), v1::JOB_STARTING);
  v1::HeartbeatResponse active = Beat(ServerHeartbeat(1, "s1"));
  EXPECT_EQ(active.phase(), v1::JOB_RUNNING);
  EXPECT_EQ(active.epoch(), 1u) << "STARTING -> ACTIVE does not bump the epoch";
  EXPECT_FALSE(active.fenced());

  clock_.Advance(absl::Seconds(1));
  Beat(WorkerHeartbeat(0, "w0", 100, /*done=*/true));
  EXPECT_EQ(service_->phase(), v1::JOB_RUNNING) << "worker 1 is not done";
  // A done worker that exits is not declared dead.
  clock_.Advance(absl::Seconds(1));
  Beat(WorkerHeartbeat(1, "w1", 99));
  BeatAllBut("w0", 2, 0);
  clock_.Advance(absl::Milliseconds(1000));
  service_->Tick();
  EXPECT_EQ(service_->phase(), v1::JOB_RUNNING) << service_->error();
  EXPECT_EQ(StateOf(v1::ROLE_WORKER, 0), v1::NODE_FINISHED);

  v1::HeartbeatResponse last = Beat(WorkerHeartbeat(1, "w1", 100, /*done=*/true));
  EXPECT_EQ(last.phase(), v1::JOB_FINISHED);
  v1::StatusResponse status = Status();
  EXPECT_EQ(status.phase(), v1::JOB_FINISHED);
  EXPECT_EQ(status.step(), 100);
  EXPECT_EQ(status.total_steps(), 100);
  EXPECT_DOUBLE_EQ(status.elapsed_s(), 3);
  EXPECT_EQ(status.epoch(), 1u);
  EXPECT_TRUE(status.error().empty());
}

TEST_F(CoordinatorServiceTest, WorkerErrorFailsTheJob) {
  StartJob(1, 1);
  v1::HeartbeatRequest hb = WorkerHeartbeat(0, "w0", 3);
  hb.mutable_worker()->set_error("bad input line 12");
  EXPECT_EQ(Beat(hb).phase(), v1::JOB_FAILED);
  EXPECT_NE(service_->error().find("bad input line 12"), std::string::npos);
  EXPECT_EQ(Status().error(), service_->error());
}

TEST_F(CoordinatorServiceTest, SilentServerIsDeclaredDeadAfterTimeoutAndFailsModeNone) {
  StartJob(2, 1);
  clock_.Advance(kTimeout);
  BeatAllBut("s1", 2, 1);
  service_->Tick();
  EXPECT_EQ(service_->phase(), v1::JOB_RUNNING) << "not dead at exactly the timeout";
  EXPECT_EQ(service_->epoch(), 1u);

  clock_.Advance(absl::Milliseconds(1));
  service_->Tick();
  EXPECT_EQ(StateOf(v1::ROLE_SERVER, 1), v1::NODE_DEAD);
  EXPECT_EQ(service_->epoch(), 2u) << "a death bumps the epoch";
  EXPECT_EQ(service_->phase(), v1::JOB_FAILED);
  EXPECT_NE(service_->error().find("server 1"), std::string::npos) << service_->error();

  v1::HeartbeatResponse late = Beat(ServerHeartbeat(1, "s1"));
  EXPECT_TRUE(late.fenced()) << "the dead instance must exit";
  EXPECT_EQ(late.epoch(), 2u);
  EXPECT_EQ(late.phase(), v1::JOB_FAILED);
  EXPECT_FALSE(Beat(ServerHeartbeat(0, "s0")).fenced());
}

TEST_F(CoordinatorServiceTest, SilentWorkerIsDeclaredDeadAndItsSlotWaitsForAReplacement) {
  StartJob(1, 2);
  clock_.Advance(kTimeout + absl::Milliseconds(1));
  BeatAllBut("w1", 1, 2);
  service_->Tick();
  EXPECT_EQ(StateOf(v1::ROLE_WORKER, 1), v1::NODE_DEAD);
  EXPECT_EQ(service_->phase(), v1::JOB_RUNNING) << service_->error();
  EXPECT_EQ(service_->epoch(), 2u);
}

TEST_F(CoordinatorServiceTest, ServerDeadHandlerCanTakeChargeOfRecovery) {
  StartJob(2, 1);
  std::vector<int> dead;
  uint64_t epoch_seen = 0;
  service_->SetServerDeadHandler([&](int id) {
    dead.push_back(id);
    epoch_seen = service_->epoch();  // may call back into the service
    return true;
  });
  clock_.Advance(kTimeout + absl::Milliseconds(1));
  BeatAllBut("s0", 2, 1);
  service_->Tick();
  EXPECT_EQ(dead, std::vector<int>{0});
  EXPECT_EQ(epoch_seen, 2u) << "the handler runs after the new epoch is published";
  EXPECT_EQ(service_->phase(), v1::JOB_RECOVERING) << service_->error();
}

// A reported server whose port refuses connections is dead at once, with no time passing;
// one whose port still answers waits for the suspicion timeout as before.
TEST_F(CoordinatorServiceTest, ReportedServerWhoseProcessIsGoneIsDeclaredDeadAtOnce) {
  std::vector<std::string> probed;
  bool gone = false;
  CoordinatorServiceOptions options;
  options.process_gone = [&](const std::string& address) {
    probed.push_back(address);
    return gone;
  };
  StartJob(3, 1, options);
  const std::string address = AddressOf(v1::ROLE_SERVER, 1);
  ASSERT_FALSE(address.empty());
  v1::ReportFailureResponse rf;
  ASSERT_TRUE(service_->ReportFailure(FailureReport(v1::ROLE_SERVER, 1), &rf).ok());
  EXPECT_EQ(probed, std::vector<std::string>{address});
  EXPECT_EQ(StateOf(v1::ROLE_SERVER, 1), v1::NODE_SUSPECT) << "its port still answers";

  gone = true;
  ASSERT_TRUE(service_->ReportFailure(FailureReport(v1::ROLE_SERVER, 2), &rf).ok());
  EXPECT_EQ(probed.size(), 2u);
  EXPECT_EQ(StateOf(v1::ROLE_SERVER, 2), v1::NODE_DEAD) << "no time passed: the probe said so";
  EXPECT_EQ(StateOf(v1::ROLE_SERVER, 1), v1::NODE_SUSPECT);
  EXPECT_EQ(StateOf(v1::ROLE_SERVER, 0), v1::NODE_ACTIVE);
  EXPECT_EQ(service_->epoch(), 2u);
}

// A report can come after the first probe found the port still open (the report raced the
// kill); the tick probes a suspected server again, and a refused port then ends it with no
// time passing.
TEST_F(CoordinatorServiceTest, SuspectedServerIsProbedAgainOnEveryTick) {
  int probes = 0;
  bool gone = false;
  CoordinatorServiceOptions options;
  options.process_gone = [&](const std::string&) {
    ++probes;
    return gone;
  };
  StartJob(3, 1, options);
  service_->Tick();
  EXPECT_EQ(probes, 0) << "no server is suspected: nothing to probe";
  v1::ReportFailureResponse rf;
  ASSERT_TRUE(service_->ReportFailure(FailureReport(v1::ROLE_SERVER, 1), &rf).ok());
  EXPECT_EQ(probes, 1);
  service_->Tick();
  EXPECT_EQ(probes, 2);
  EXPECT_EQ(StateOf(v1::ROLE_SERVER, 1), v1::NODE_SUSPECT);
  gone = true;
  service_->Tick();
  EXPECT_EQ(StateOf(v1::ROLE_SERVER, 1), v1::NODE_DEAD);
  EXPECT_EQ(service_->epoch(), 2u);
  service_->Tick();
  EXPECT_EQ(probes, 3) << "a dead server is not probed";
}

// A failure seen at an address the id is no longer held at (the previous holder, before a
// takeover) says nothing about the current holder: it is not suspected, nor probed.
TEST_F(CoordinatorServiceTest, ReportAboutAnotherAddressThanTheHoldersIsIgnored) {
  int probes = 0;
  CoordinatorServiceOptions options;
  options.process_gone = [&](const std::string&) {
    ++probes;
    return false;
  };
  StartJob(3, 1, options);
  const std::string address = AddressOf(v1::ROLE_SERVER, 1);
  ASSERT_FALSE(address.empty());
  v1::ReportFailureRequest stale = FailureReport(v1::ROLE_SERVER, 1);
  stale.set_address(address + "0");
  v1::ReportFailureResponse rf;
  ASSERT_TRUE(service_->ReportFailure(stale, &rf).ok());
  EXPECT_EQ(StateOf(v1::ROLE_SERVER, 1), v1::NODE_ACTIVE);
  EXPECT_EQ(probes, 0);
  v1::ReportFailureRequest current = FailureReport(v1::ROLE_SERVER, 1);
  current.set_address(address);
  ASSERT_TRUE(service_->ReportFailure(current, &rf).ok());
  EXPECT_EQ(StateOf(v1::ROLE_SERVER, 1), v1::NODE_SUSPECT);
  EXPECT_EQ(probes, 1);
}

TEST_F(CoordinatorServiceTest, FalseFailureReportDoesNotKillAHealthyServer) {
  StartJob(2, 1);
  clock_.Advance(absl::Milliseconds(100));
  BeatAllBut("", 2, 1);
  v1::ReportFailureResponse rf;
  ASSERT_TRUE(service_->ReportFailure(FailureReport(v1::ROLE_SERVER, 1), &rf).ok());
  EXPECT_EQ(StateOf(v1::ROLE_SERVER, 1), v1::NODE_SUSPECT);
  service_->Tick();
  EXPECT_EQ(StateOf(v1::ROLE_SERVER, 1), v1::NODE_SUSPECT);

  clock_.Advance(absl::Milliseconds(200));
  BeatAllBut("", 2, 1);  // server 1 is alive after all
  EXPECT_EQ(StateOf(v1::ROLE_SERVER, 1), v1::NODE_ACTIVE);
  // Past the suspicion timeout (500 ms), within the heartbeat timeout.
  clock_.Advance(absl::Milliseconds(1000));
  service_->Tick();
  EXPECT_EQ(StateOf(v1::ROLE_SERVER, 1), v1::NODE_ACTIVE);
  EXPECT_EQ(service_->phase(), v1::JOB_RUNNING) << service_->error();
  EXPECT_EQ(service_->epoch(), 1u);
}

TEST_F(CoordinatorServiceTest, FailureReportOfAStaleServerIsConfirmedAtOnce) {
  StartJob(2, 1);
  clock_.Advance(absl::Milliseconds(600));  // > 1500/3 suspicion timeout, < heartbeat timeout
  BeatAllBut("s1", 2, 1);
  service_->Tick();
  ASSERT_EQ(service_->epoch(), 1u);
  v1::ReportFailureResponse rf;
  ASSERT_TRUE(service_->ReportFailure(FailureReport(v1::ROLE_SERVER, 1), &rf).ok());
  EXPECT_EQ(StateOf(v1::ROLE_SERVER, 1), v1::NODE_DEAD);
  EXPECT_EQ(service_->epoch(), 2u);
  EXPECT_EQ(service_->phase(), v1::JOB_FAILED);
}

TEST_F(CoordinatorServiceTest, FailureReportValidatesTheTarget) {
  Make(2, 1);
  Register(ServerRegistration(0, "s0"));
  v1::ReportFailureResponse rf;
  EXPECT_EQ(service_->ReportFailure(FailureReport(v1::ROLE_SERVER, 7), &rf).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(service_->ReportFailure(FailureReport(v1::ROLE_SERVER, 1), &rf).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(CoordinatorServiceTest, ReplacementFencesTheOldInstance) {
  Make(2, 1);
  service_->SetServerDeadHandler([](int) { return true; });  // keep the job alive
  Register(ServerRegistration(0, "old"));
  Register(ServerRegistration(1, "s1"));
  clock_.Advance(kTimeout + absl::Milliseconds(1));
  Beat(ServerHeartbeat(1, "s1"));
  service_->Tick();
  ASSERT_EQ(service_->epoch(), 2u);
  v1::RegisterResponse replacement = Register(ServerRegistration(0, "new"));
  EXPECT_EQ(replacement.id(), 0);
  EXPECT_EQ(replacement.state(), v1::NODE_RECOVERING);
  EXPECT_EQ(replacement.map().epoch(), 3u);
  EXPECT_EQ(replacement.map().servers(0).instance(), "new");
  EXPECT_TRUE(Beat(ServerHeartbeat(0, "old")).fenced());
  EXPECT_FALSE(Beat(ServerHeartbeat(0, "new")).fenced());
}

TEST_F(CoordinatorServiceTest, StartupTimeoutFailsTheJobNamingWhatIsMissing) {
  CoordinatorServiceOptions options;
  options.startup_timeout = absl::Seconds(10);
  Make(2, 1, options);
  Register(ServerRegistration(0, "s0"));
  Beat(ServerHeartbeat(0, "s0"));
  clock_.Advance(absl::Seconds(10));
  Beat(ServerHeartbeat(0, "s0"));
  service_->Tick();
  EXPECT_EQ(service_->phase(), v1::JOB_STARTING);
  clock_.Advance(absl::Milliseconds(1));
  service_->Tick();
  EXPECT_EQ(service_->phase(), v1::JOB_FAILED);
  EXPECT_NE(service_->error().find("server 1 (not registered)"), std::string::npos)
      << service_->error();
  EXPECT_NE(service_->error().find("worker 0 (not registered)"), std::string::npos);
}

TEST_F(CoordinatorServiceTest, StatusReportsNodesAndProgress) {
  StartJob(2, 2);
  clock_.Advance(absl::Seconds(9));
  // Both workers train 10 steps of 100 samples in the second before the status.
  Beat(WorkerHeartbeat(0, "w0", 30));
  Beat(WorkerHeartbeat(1, "w1", 10));
  clock_.Advance(absl::Seconds(1));
  Beat(ServerHeartbeat(0, "s0"));
  v1::HeartbeatRequest w0 = WorkerHeartbeat(0, "w0", 40);
  w0.mutable_worker()->set_eval_auc(0.75);
  w0.mutable_worker()->set_eval_step(40);
  w0.mutable_worker()->set_samples_per_s(9999);  // its own rate: not what the job shows
  Beat(w0);
  Beat(WorkerHeartbeat(1, "w1", 20));
  clock_.Advance(absl::Milliseconds(250));
  v1::StatusResponse status = Status();
  EXPECT_EQ(status.job(), "test-job");
  EXPECT_EQ(status.phase(), v1::JOB_RUNNING);
  EXPECT_EQ(status.mode(), "none");
  EXPECT_EQ(status.k(), 1);
  EXPECT_EQ(status.r(), 0);
  EXPECT_EQ(status.step(), 20);
  EXPECT_EQ(status.samples(), 6000);
  EXPECT_DOUBLE_EQ(status.samples_per_s(), 2000);
  EXPECT_DOUBLE_EQ(status.eval_auc(), 0.75);
  EXPECT_NEAR(status.elapsed_s(), 10.25, 1e-9);
  EXPECT_NEAR(status.eta_s(), 80 / (20 / 10.25), 1e-6);
  ASSERT_EQ(status.nodes_size(), 4);
  EXPECT_EQ(status.nodes(0).heartbeat_age_ms(), 250);
  EXPECT_EQ(status.nodes(1).heartbeat_age_ms(), 10250);
  EXPECT_EQ(status.nodes(0).address(), "127.0.0.1:7000");
  EXPECT_EQ(status.nodes(0).server().data_rows(), 1000);
  EXPECT_EQ(status.nodes(2).worker().step(), 40);
  EXPECT_DOUBLE_EQ(status.nodes(2).worker().samples_per_s(), 1000) << "the coordinator's rate";
}

// Collects what WatchClusterMap sends, for a watcher running on its own thread.
class MapSink {
 public:
  bool Send(const v1::ClusterMap& map) {
    absl::MutexLock lock(&mu_);
    maps_.push_back(map);
    return true;
  }
  // Waits (up to 10 s) until `count` maps arrived; returns the last one or nullopt.
  std::optional<v1::ClusterMap> WaitFor(size_t count) {
    absl::MutexLock lock(&mu_);
    auto arrived = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return maps_.size() >= count; };
    if (!mu_.AwaitWithTimeout(absl::Condition(&arrived), absl::Seconds(10))) return std::nullopt;
    return maps_[count - 1];
  }
  size_t size() {
    absl::MutexLock lock(&mu_);
    return maps_.size();
  }

 private:
  absl::Mutex mu_;
  std::deque<v1::ClusterMap> maps_ ABSL_GUARDED_BY(mu_);
};

TEST_F(CoordinatorServiceTest, WatchSendsTheMapAndEveryChangeUntilShutdown) {
  CoordinatorServiceOptions options;
  options.watch_wakeup = absl::Milliseconds(20);
  Make(2, 1, options);
  Register(ServerRegistration(0, "s0"));
  MapSink sink;
  absl::Status watch_status;
  v1::WatchClusterMapRequest request;
  FillHeader(request.mutable_header(), kToken, 1, "t");
  request.set_known_epoch(1);
  std::thread watcher([&] {
    watch_status = service_->WatchClusterMap(
        request, [] { return false; }, [&](const v1::ClusterMap& m) { return sink.Send(m); });
  });
  std::optional<v1::ClusterMap> first = sink.WaitFor(1);
  ASSERT_TRUE(first.has_value()) << "no initial map";
  EXPECT_EQ(first->servers(0).instance(), "s0");
  EXPECT_EQ(first->servers(0).state(), v1::NODE_STARTING);

  Beat(ServerHeartbeat(0, "s0"));
  std::optional<v1::ClusterMap> second = sink.WaitFor(2);
  ASSERT_TRUE(second.has_value()) << "no update after a state change";
  EXPECT_EQ(second->servers(0).state(), v1::NODE_ACTIVE);
  EXPECT_GT(second->version(), first->version());
  EXPECT_EQ(second->epoch(), 1u);

  Beat(ServerHeartbeat(0, "s0"));  // no change: nothing is sent
  service_->Shutdown();
  watcher.join();
  EXPECT_EQ(watch_status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(sink.size(), 2u);
}

TEST_F(CoordinatorServiceTest, WatchSkipsAMapTheClientHasAndEndsOnCancel) {
  CoordinatorServiceOptions options;
  options.watch_wakeup = absl::Milliseconds(1);
  Make(1, 1, options);
  v1::RegisterResponse reg = Register(ServerRegistration(0, "s0"));
  v1::WatchClusterMapRequest request;
  FillHeader(request.mutable_header(), kToken, 1, "t");
  request.set_known_epoch(reg.map().epoch());
  request.set_known_version(reg.map().version());
  int polls = 0;
  int sent = 0;
  // The client already has this map: nothing is sent, and the watch ends once the client
  // cancels (here: at the second poll).
  absl::Status status = service_->WatchClusterMap(
      request, [&] { return ++polls >= 2; },
      [&](const v1::ClusterMap&) {
        ++sent;
        return true;
      });
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(sent, 0);
  EXPECT_GE(polls, 2);

  // An older version is newer news: sent at once.
  request.set_known_version(reg.map().version() - 1);
  polls = 0;
  status = service_->WatchClusterMap(
      request, [&] { return ++polls >= 2; },
      [&](const v1::ClusterMap& map) {
        ++sent;
        EXPECT_EQ(map.version(), reg.map().version());
        return false;  // the client went away
      });
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(sent, 1);
}

}  // namespace
}  // namespace ecps
