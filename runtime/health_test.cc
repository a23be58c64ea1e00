// grpc.health.v1 on servers started by StartGrpcServer, asked with CheckHealth over a real
// connection.
#include "runtime/health.h"

#include <gtest/gtest.h>

#include "runtime/rpc.h"

namespace ecps {
namespace {

constexpr int kDeadlineMs = 5000;

TEST(HealthTest, LivenessIsServingOnEveryServer) {
  auto server = StartGrpcServer("127.0.0.1", 0, {});
  ASSERT_TRUE(server.ok()) << server.status();
  auto live = CheckHealth(server->address, Role::kServer, kLivenessService, kDeadlineMs);
  ASSERT_TRUE(live.ok()) << live.status();
  EXPECT_EQ(*live, HealthStatus::kServing);
  server->server->Shutdown();
}

TEST(HealthTest, ARoleServiceFollowsWhatTheRoleSets) {
  auto server = StartGrpcServer("127.0.0.1", 0, {});
  ASSERT_TRUE(server.ok()) << server.status();
  // Not declared yet: the health service does not know it.
  auto unknown = CheckHealth(server->address, Role::kServer, kParameterServerHealthService, kDeadlineMs);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound) << unknown.status();

  SetHealth(server->server.get(), kParameterServerHealthService, false);
  auto starting = CheckHealth(server->address, Role::kServer, kParameterServerHealthService, kDeadlineMs);
  ASSERT_TRUE(starting.ok()) << starting.status();
  EXPECT_EQ(*starting, HealthStatus::kNotServing);

  SetHealth(server->server.get(), kParameterServerHealthService, true);
  auto ready = CheckHealth(server->address, Role::kServer, kParameterServerHealthService, kDeadlineMs);
  ASSERT_TRUE(ready.ok()) << ready.status();
  EXPECT_EQ(*ready, HealthStatus::kServing);
  // A role's readiness leaves its liveness alone.
  SetHealth(server->server.get(), kParameterServerHealthService, false);
  auto live = CheckHealth(server->address, Role::kServer, kLivenessService, kDeadlineMs);
  ASSERT_TRUE(live.ok()) << live.status();
  EXPECT_EQ(*live, HealthStatus::kServing);
  server->server->Shutdown();
}

TEST(HealthTest, AServerThatIsGoneIsAnErrorNotAStatus) {
  auto server = StartGrpcServer("127.0.0.1", 0, {});
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = server->address;
  server->server->Shutdown();
  server->server->Wait();
  server->server.reset();
  auto gone = CheckHealth(address, Role::kServer, kLivenessService, 1000);
  EXPECT_FALSE(gone.ok());
}

TEST(HealthTest, StatusNamesMatchTheHealthProto) {
  EXPECT_STREQ(ToString(HealthStatus::kServing), "SERVING");
  EXPECT_STREQ(ToString(HealthStatus::kNotServing), "NOT_SERVING");
  EXPECT_STREQ(ToString(HealthStatus::kServiceUnknown), "SERVICE_UNKNOWN");
  EXPECT_STREQ(ToString(HealthStatus::kUnknown), "UNKNOWN");
}

}  // namespace
}  // namespace ecps
