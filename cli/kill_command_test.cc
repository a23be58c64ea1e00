// `ecps kill` against a real coordinator (gRPC on a free port, fake clock).
#include "cli/kill_command.h"

#include "cli/status_command.h"
#include "coordinator/clock.h"
#include "coordinator/coordinator_service.h"
#include "coordinator/coordinator_test_util.h"
#include "coordinator/grpc_coordinator.h"
#include "gtest/gtest.h"
#include "proto/ecps.pb.h"
#include "runtime/rpc.h"

namespace ecps {
namespace {

using testing::kToken;
using testing::ServerHeartbeat;
using testing::ServerRegistration;
using testing::TestSpec;
using testing::WorkerHeartbeat;
using testing::WorkerRegistration;

class KillCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto created = CoordinatorService::Create(TestSpec(1, 1), kToken, &clock_);
    ASSERT_TRUE(created.ok()) << created.status();
    service_ = std::move(created).value();
    glue_ = std::make_unique<GrpcCoordinator>(service_.get());
    auto server = StartGrpcServer("127.0.0.1", 0, {glue_->grpc_service()});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(server).value();
    v1::RegisterResponse r;
    ASSERT_TRUE(service_->Register(ServerRegistration(0, "s0"), &r).ok());
    ASSERT_TRUE(service_->Register(WorkerRegistration(0, "w0"), &r).ok());
  }
  void TearDown() override {
    service_->Shutdown();
    if (server_.server) server_.server->Shutdown();
  }
  bool KillFlag(const v1::HeartbeatRequest& request) {
    v1::HeartbeatResponse hb;
    EXPECT_TRUE(service_->Heartbeat(request, &hb).ok());
    return hb.kill();
  }

  FakeClock clock_;
  std::unique_ptr<CoordinatorService> service_;
  std::unique_ptr<GrpcCoordinator> glue_;
  GrpcServer server_;
};

TEST_F(KillCommandTest, FlagsTheNodesNextHeartbeatOnly) {
  EXPECT_FALSE(KillFlag(ServerHeartbeat(0, "s0")));
  EXPECT_EQ(RunKillCommand(server_.address, kToken, "server", "0"), kStatusOk);
  EXPECT_TRUE(KillFlag(ServerHeartbeat(0, "s0")));
  EXPECT_FALSE(KillFlag(WorkerHeartbeat(0, "w0", 3))) << "only the named node dies";
}

TEST_F(KillCommandTest, WrongTokenReturnsThreeAndFlagsNothing) {
  EXPECT_EQ(RunKillCommand(server_.address, "wrong", "worker", "0"), kStatusBadToken);
  EXPECT_FALSE(KillFlag(WorkerHeartbeat(0, "w0", 3)));
}

TEST_F(KillCommandTest, BadTargetsAreErrors) {
  EXPECT_EQ(RunKillCommand(server_.address, kToken, "server", "7"), kStatusError);
  EXPECT_EQ(RunKillCommand(server_.address, kToken, "spare", "0"), kStatusError);
  EXPECT_EQ(RunKillCommand(server_.address, kToken, "worker", "x"), kStatusError);
}

TEST_F(KillCommandTest, UnreachableCoordinatorReturnsTwo) {
  const std::string address = server_.address;
  service_->Shutdown();
  server_.server->Shutdown();
  server_.server->Wait();
  server_.server.reset();
  EXPECT_EQ(RunKillCommand(address, kToken, "server", "0"), kStatusUnreachable);
}

}  // namespace
}  // namespace ecps
