// Network tests: CoordinatorService behind GrpcCoordinator on a real gRPC server (port 0).
#include "coordinator/grpc_coordinator.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "coordinator/coordinator_main.h"
#include "coordinator/coordinator_service.h"
#include "coordinator/coordinator_test_util.h"
#include "gtest/gtest.h"
#include "proto/ecps.grpc.pb.h"
#include "proto/ecps.pb.h"
#include "runtime/rpc.h"

namespace ecps {
namespace {

using testing::kToken;
using testing::ServerHeartbeat;
using testing::ServerRegistration;
using testing::StatusQuery;
using testing::TestSpec;
using testing::WorkerHeartbeat;
using testing::WorkerRegistration;

std::unique_ptr<grpc::ClientContext> Context(absl::Duration deadline = absl::Seconds(10)) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::milliseconds(absl::ToInt64Milliseconds(deadline)));
  return context;
}

class GrpcCoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorServiceOptions options;
    options.watch_wakeup = absl::Milliseconds(20);
    auto created = CoordinatorService::Create(TestSpec(2, 1), kToken, &clock_, options);
    ASSERT_TRUE(created.ok()) << created.status();
    service_ = std::move(created).value();
    glue_ = std::make_unique<GrpcCoordinator>(service_.get());
    auto server = StartGrpcServer("127.0.0.1", 0, {glue_->grpc_service()});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(server).value();
    stub_ = v1::Coordinator::NewStub(MakeChannel(server_.address, Role::kCoordinator));
  }

  void TearDown() override {
    if (service_) service_->Shutdown();
    if (server_.server) server_.server->Shutdown();  // no deadline: must not hang
  }

  grpc::Status Register(const v1::RegisterRequest& request, v1::RegisterResponse* response) {
    return stub_->Register(Context().get(), request, response);
  }
  v1::HeartbeatResponse Beat(const v1::HeartbeatRequest& request) {
    v1::HeartbeatResponse response;
    grpc::Status status = stub_->Heartbeat(Context().get(), request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response;
  }
  v1::StatusResponse Status() {
    v1::StatusResponse response;
    grpc::Status status = stub_->Status(Context().get(), StatusQuery(), &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response;
  }

  FakeClock clock_;
  std::unique_ptr<CoordinatorService> service_;
  std::unique_ptr<GrpcCoordinator> glue_;
  GrpcServer server_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
};

TEST_F(GrpcCoordinatorTest, WrongTokenIsUnauthenticatedAndRegistersNothing) {
  v1::RegisterResponse response;
  grpc::Status status = Register(ServerRegistration(0, "s0", "wrong"), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  v1::StatusResponse bad;
  EXPECT_EQ(stub_->Status(Context().get(), StatusQuery("wrong"), &bad).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Status().nodes_size(), 0);
}

TEST_F(GrpcCoordinatorTest, RegisterAndHeartbeatsRunTheJobToFinished) {
  v1::RegisterResponse r;
  ASSERT_TRUE(Register(ServerRegistration(0, "s0"), &r).ok());
  ASSERT_TRUE(Register(ServerRegistration(1, "s1"), &r).ok());
  EXPECT_EQ(Register(ServerRegistration(1, "dup"), &r).error_code(),
            grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(Register(ServerRegistration(5, "bad"), &r).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  ASSERT_TRUE(Register(WorkerRegistration(-1, "w0"), &r).ok());
  EXPECT_EQ(r.id(), 0);
  EXPECT_EQ(Status().phase(), v1::JOB_STARTING);

  Beat(ServerHeartbeat(0, "s0"));
  EXPECT_EQ(Beat(ServerHeartbeat(1, "s1")).phase(), v1::JOB_RUNNING);
  EXPECT_EQ(Status().phase(), v1::JOB_RUNNING);

  Beat(WorkerHeartbeat(0, "w0", 50));
  EXPECT_EQ(Status().step(), 50);
  EXPECT_EQ(Beat(WorkerHeartbeat(0, "w0", 100, /*done=*/true)).phase(), v1::JOB_FINISHED);
  v1::StatusResponse status = Status();
  EXPECT_EQ(status.phase(), v1::JOB_FINISHED);
  EXPECT_EQ(status.step(), 100);
  ASSERT_EQ(status.nodes_size(), 3);
  EXPECT_EQ(status.nodes(2).state(), v1::NODE_FINISHED);
}

TEST_F(GrpcCoordinatorTest, WatchStreamsTheInitialMapAndUpdatesAndEndsOnShutdown) {
  v1::RegisterResponse r;
  ASSERT_TRUE(Register(ServerRegistration(0, "s0"), &r).ok());

  v1::WatchClusterMapRequest request;
  FillHeader(request.mutable_header(), kToken, r.map().epoch(), "server-0");
  request.set_known_epoch(0);
  auto context = Context(absl::Seconds(30));
  std::unique_ptr<grpc::ClientReader<v1::ClusterMap>> reader =
      stub_->WatchClusterMap(context.get(), request);
  v1::ClusterMap map;
  ASSERT_TRUE(reader->Read(&map)) << "no initial map";
  EXPECT_EQ(map.epoch(), 1u);
  ASSERT_EQ(map.servers_size(), 2);
  EXPECT_EQ(map.servers(0).state(), v1::NODE_STARTING);

  Beat(ServerHeartbeat(0, "s0"));  // STARTING -> ACTIVE
  ASSERT_TRUE(reader->Read(&map)) << "no update after a state change";
  EXPECT_EQ(map.servers(0).state(), v1::NODE_ACTIVE);
  EXPECT_EQ(map.epoch(), 1u);

  ASSERT_TRUE(Register(ServerRegistration(1, "s1"), &r).ok());
  ASSERT_TRUE(reader->Read(&map));
  EXPECT_EQ(map.servers(1).instance(), "s1");

  service_->Shutdown();
  EXPECT_FALSE(reader->Read(&map)) << "the stream ends when the coordinator shuts down";
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(GrpcCoordinatorTest, CancelledWatchReturnsItsThread) {
  auto context = Context(absl::Seconds(30));
  v1::WatchClusterMapRequest request;
  FillHeader(request.mutable_header(), kToken, 0, "t");
  auto reader = stub_->WatchClusterMap(context.get(), request);
  v1::ClusterMap map;
  ASSERT_TRUE(reader->Read(&map));
  context->TryCancel();
  EXPECT_FALSE(reader->Read(&map));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  // TearDown shuts the server down without a deadline: it returns only if the handler did.
}

// The process entry point: port file, RPCs, exit codes.
std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name, ".", getpid());
}

int WaitForPortFile(const std::string& path, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    std::ifstream in(path);
    int port = 0;
    if (in >> port && port > 0) return port;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // polling a file, bounded
  }
  return 0;
}

TEST(RunCoordinatorTest, ServesTheJobAndReturnsZeroWhenItFinishes) {
  CoordinatorOptions options;
  options.spec = TestSpec(1, 1);
  options.spec.cluster.heartbeat_timeout_ms = 60000;  // no deaths on a loaded machine
  options.spec.fault_tolerance.checkpoint.save_final = false;  // no real server to save
  options.token = kToken;
  options.port_file = TempPath("coordinator-port");
  options.linger_ms = 50;
  std::remove(options.port_file.c_str());
  int exit_code = -1;
  std::thread coordinator([&] { exit_code = RunCoordinator(options); });

  const int port = WaitForPortFile(options.port_file, absl::Seconds(30));
  ASSERT_GT(port, 0) << "no port file";
  auto stub = v1::Coordinator::NewStub(MakeChannel(absl::StrCat("127.0.0.1:", port), Role::kCoordinator));
  v1::RegisterResponse r;
  ASSERT_TRUE(stub->Register(Context().get(), ServerRegistration(0, "s0"), &r).ok());
  ASSERT_TRUE(stub->Register(Context().get(), WorkerRegistration(0, "w0"), &r).ok());
  v1::HeartbeatResponse hb;
  ASSERT_TRUE(stub->Heartbeat(Context().get(), ServerHeartbeat(0, "s0"), &hb).ok());
  EXPECT_EQ(hb.phase(), v1::JOB_RUNNING);
  ASSERT_TRUE(stub->Heartbeat(Context().get(), WorkerHeartbeat(0, "w0", 100, true), &hb).ok());
  EXPECT_EQ(hb.phase(), v1::JOB_FINISHED);
  coordinator.join();
  EXPECT_EQ(exit_code, 0);
  std::remove(options.port_file.c_str());
}

TEST(RunCoordinatorTest, ReturnsOneWhenTheJobFails) {
  CoordinatorOptions options;
  options.spec = TestSpec(1, 1);
  options.token = kToken;
  options.startup_timeout_ms = 100;  // nobody registers
  options.linger_ms = 10;
  EXPECT_EQ(RunCoordinator(options), 1);
}

}  // namespace
}  // namespace ecps
