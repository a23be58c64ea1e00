// `ecps kill` against a real coordinator (gRPC on a free port, fake clock).
#include "cli/kill_command.h"

#include "cli/status_command.h"
#include "runtime/clock.h"
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

class KillCommandTest : public testing::ServedCoordinatorFixture {
 protected:
  bool KillFlag(const v1::HeartbeatRequest& request) {
    v1::HeartbeatResponse hb;
    EXPECT_TRUE(service_->Heartbeat(request, &hb).ok());
    return hb.kill();
  }
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
