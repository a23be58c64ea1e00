// Test helpers: job specs and requests for coordinator tests (header-only; tests only).
#ifndef ECPS_COORDINATOR_COORDINATOR_TEST_UTIL_H_
#define ECPS_COORDINATOR_COORDINATOR_TEST_UTIL_H_

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "runtime/clock.h"
#include "coordinator/coordinator_service.h"
#include "coordinator/grpc_coordinator.h"
#include "gtest/gtest.h"
#include "proto/coordinator_state.pb.h"
#include "proto/ecps.pb.h"
#include "runtime/rpc.h"
#include "runtime/spec.h"

namespace ecps::testing {

inline constexpr char kToken[] = "secret-token";

inline JobSpec TestSpec(int servers, int workers, int64_t steps = 100) {
  JobSpec spec;
  spec.job.name = "test-job";
  spec.job.steps = steps;
  spec.cluster.servers = servers;
  spec.cluster.workers = workers;
  spec.cluster.heartbeat_timeout_ms = 1500;
  spec.fault_tolerance.mode = FaultToleranceMode::kNone;
  return spec;
}

inline v1::RegisterRequest ServerRegistration(int requested_id, const std::string& instance,
                                              const std::string& token = kToken) {
  v1::RegisterRequest request;
  FillHeader(request.mutable_header(), token, 0, "server");
  request.set_role(v1::ROLE_SERVER);
  request.set_address(absl::StrCat("127.0.0.1:", 7000 + (requested_id < 0 ? 99 : requested_id)));
  request.set_requested_id(requested_id);
  request.set_instance(instance);
  request.set_pid(1000 + requested_id);
  return request;
}

inline v1::RegisterRequest WorkerRegistration(int requested_id, const std::string& instance,
                                              const std::string& token = kToken) {
  v1::RegisterRequest request;
  FillHeader(request.mutable_header(), token, 0, "worker");
  request.set_role(v1::ROLE_WORKER);
  request.set_requested_id(requested_id);
  request.set_instance(instance);
  request.set_pid(2000 + requested_id);
  return request;
}

inline v1::HeartbeatRequest ServerHeartbeat(int id, const std::string& instance,
                                            v1::NodeState state = v1::NODE_ACTIVE,
                                            const std::string& token = kToken) {
  v1::HeartbeatRequest request;
  FillHeader(request.mutable_header(), token, 1, absl::StrCat("server-", id));
  request.set_role(v1::ROLE_SERVER);
  request.set_id(id);
  request.set_instance(instance);
  request.set_state(state);
  request.mutable_server()->set_data_rows(1000 + id);
  request.mutable_server()->set_parity_rows(10 + id);
  request.mutable_server()->set_bytes(1 << 20);
  return request;
}

inline v1::HeartbeatRequest WorkerHeartbeat(int id, const std::string& instance, int64_t step,
                                            bool done = false, const std::string& token = kToken) {
  v1::HeartbeatRequest request;
  FillHeader(request.mutable_header(), token, 1, absl::StrCat("worker-", id));
  request.set_role(v1::ROLE_WORKER);
  request.set_id(id);
  request.set_instance(instance);
  request.set_state(v1::NODE_ACTIVE);
  v1::WorkerProgress* progress = request.mutable_worker();
  progress->set_step(step);
  progress->set_samples(step * 100);
  progress->set_samples_per_s(500);
  progress->set_loss(0.5);
  progress->set_eval_auc(-1);
  progress->set_done(done);
  return request;
}

inline v1::ReportFailureRequest FailureReport(v1::Role role, int id,
                                              const std::string& token = kToken) {
  v1::ReportFailureRequest request;
  FillHeader(request.mutable_header(), token, 1, "worker-0");
  request.set_role(role);
  request.set_id(id);
  request.set_reason("Pull: connection refused");
  return request;
}

// Mode checkpoint's wiring, as coordinator_main installs it: a dead server starts a rollback
// and gets a spare; the reloader has every server "reload" the checkpoint of step 5 (worker
// 0's reader at 640).
inline void WireRollback(CoordinatorService* service) {
  service->SetServerDeadHandler([service](int id) {
    if (!service->BeginRollback()) return false;
    service->ReplaceServer(id);
    return true;
  });
  service->SetReloader([](const v1::ClusterMap&) -> absl::StatusOr<v1::CheckpointReport> {
    v1::CheckpointReport report;
    report.set_done(true);
    report.set_dir("/ckpt/step-000000005");
    report.set_step(5);
    report.add_reader_positions(640);
    return report;
  });
}

// Has `service` keep every state it saves in `*saved` (each save replacing the last); the
// saver saves once at once.
inline absl::Status CaptureState(CoordinatorService* service, v1::CoordinatorState* saved) {
  return service->SetStateSaver([saved](const v1::CoordinatorState& state) {
    *saved = state;
    return absl::OkStatus();
  });
}

inline v1::StatusRequest StatusQuery(const std::string& token = kToken) {
  v1::StatusRequest request;
  FillHeader(request.mutable_header(), token, 0, "cli");
  return request;
}

// A fixture holding a CoordinatorService on a fake clock, with calls that expect success.
// Tests create service_ themselves (each with its own spec and handlers).
class CoordinatorServiceFixture : public ::testing::Test {
 protected:
  // Replaces service_ with a coordinator of `spec` on the fake clock.
  void MakeService(const JobSpec& spec, CoordinatorServiceOptions options = {}) {
    auto created = CoordinatorService::Create(spec, kToken, &clock_, options);
    ASSERT_TRUE(created.ok()) << created.status();
    service_ = std::move(created).value();
  }

  v1::RegisterResponse Register(const v1::RegisterRequest& request) {
    v1::RegisterResponse response;
    absl::Status status = service_->Register(request, &response);
    EXPECT_TRUE(status.ok()) << status;
    return response;
  }

  v1::HeartbeatResponse Beat(const v1::HeartbeatRequest& request) {
    v1::HeartbeatResponse response;
    absl::Status status = service_->Heartbeat(request, &response);
    EXPECT_TRUE(status.ok()) << status;
    return response;
  }

  v1::StatusResponse Status() {
    v1::StatusResponse response;
    absl::Status status = service_->Status(StatusQuery(), &response);
    EXPECT_TRUE(status.ok()) << status;
    return response;
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

  // A coordinator of TestSpec(servers, workers).
  void Make(int servers, int workers, CoordinatorServiceOptions options = {}) {
    MakeService(TestSpec(servers, workers), options);
  }
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

  FakeClock clock_;
  std::unique_ptr<CoordinatorService> service_;
};

// A real coordinator of a 1-server, 1-worker job on a free loopback port (server_.address),
// with server s0 and worker w0 registered.
class ServedCoordinatorFixture : public CoordinatorServiceFixture {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(MakeService(TestSpec(1, 1)));
    glue_ = std::make_unique<GrpcCoordinator>(service_.get());
    auto server = StartGrpcServer("127.0.0.1", 0, {glue_->grpc_service()});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(server).value();
    Register(ServerRegistration(0, "s0"));
    Register(WorkerRegistration(0, "w0"));
  }
  void TearDown() override {
    service_->Shutdown();
    if (server_.server) server_.server->Shutdown();
  }

  std::unique_ptr<GrpcCoordinator> glue_;
  GrpcServer server_;
};

}  // namespace ecps::testing

#endif  // ECPS_COORDINATOR_COORDINATOR_TEST_UTIL_H_
