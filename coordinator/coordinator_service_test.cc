// CoordinatorService through its public handlers, with a fake clock and no network: every
// scenario of the phase machine, failure handling, checkpoints and rollback. Over 600 lines
// because each scenario is one test on one shared fixture; the decisions themselves have
// their own table tests (job_phase_test.cc, job_steps_test.cc).
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
using testing::WireRollback;
using testing::WorkerHeartbeat;
using testing::WorkerRegistration;

constexpr absl::Duration kTimeout = absl::Milliseconds(1500);  // TestSpec's heartbeat timeout

class CoordinatorServiceTest : public testing::CoordinatorServiceFixture {
 protected:
  void Make(int servers, int workers, CoordinatorServiceOptions options = {}) {
    MakeService(TestSpec(servers, workers), options);
  }

  // The node's row in Status(); an empty row (state unspecified, no address) when absent.
  v1::NodeInfo NodeOf(v1::Role role, int id) {
    const v1::StatusResponse status = Status();
    for (const v1::NodeInfo& node : status.nodes()) {
      if (node.role() == role && node.id() == id) return node;
    }
    return v1::NodeInfo();
  }
  v1::NodeState StateOf(v1::Role role, int id) { return NodeOf(role, id).state(); }
  std::string AddressOf(v1::Role role, int id) { return NodeOf(role, id).address(); }

  // Registers S servers (instances s0..) and W workers (w0..), servers heartbeat ACTIVE.
  void StartJob(int servers, int workers, CoordinatorServiceOptions options = {}) {
    Make(servers, workers, options);
    for (int i = 0; i < servers; ++i) Register(ServerRegistration(i, absl::StrCat("s", i)));
    for (int i = 0; i < servers; ++i) Beat(ServerHeartbeat(i, absl::StrCat("s", i)));
    for (int i = 0; i < workers; ++i) Register(WorkerRegistration(i, absl::StrCat("w", i)));
    ASSERT_EQ(service_->phase(), v1::JOB_RUNNING);
  }

  // Every live node except `skip` heartbeats (so only `skip` goes stale).
  void BeatAllBut(const std::string& skip, int servers, int workers) {
    for (int i = 0; i < servers; ++i) {
      if (absl::StrCat("s", i) != skip) Beat(ServerHeartbeat(i, absl::StrCat("s", i)));
    }
    for (int i = 0; i < workers; ++i) {
      if (absl::StrCat("w", i) != skip) Beat(WorkerHeartbeat(i, absl::StrCat("w", i), 5));
    }
  }
};

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

namespace ecps {
namespace {

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
