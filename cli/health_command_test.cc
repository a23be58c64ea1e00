// `ecps health` against real gRPC servers on free ports, in plaintext (over mutual TLS:
// tests/security_test.cc, which has the certificates).
#include "cli/health_command.h"

#include "gtest/gtest.h"
#include "runtime/health.h"
#include "runtime/rpc.h"

namespace ecps {
namespace {

constexpr int kDeadlineMs = 5000;

TEST(HealthCommandTest, ExitsZeroOnlyWhenServing) {
  auto server = StartGrpcServer("127.0.0.1", 0, {}, 1, nullptr);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string& address = server->address;
  EXPECT_EQ(RunHealthCommand(address, Role::kServer, "", kDeadlineMs, nullptr), kHealthServing);
  // A service the process does not (yet) report fails the probe, as NOT_SERVING does.
  EXPECT_EQ(
      RunHealthCommand(address, Role::kServer, kParameterServerHealthService, kDeadlineMs, nullptr),
      kHealthNotServing);
  SetHealth(server->server.get(), kParameterServerHealthService, false);
  EXPECT_EQ(
      RunHealthCommand(address, Role::kServer, kParameterServerHealthService, kDeadlineMs, nullptr),
      kHealthNotServing);
  SetHealth(server->server.get(), kParameterServerHealthService, true);
  EXPECT_EQ(
      RunHealthCommand(address, Role::kServer, kParameterServerHealthService, kDeadlineMs, nullptr),
      kHealthServing);
  server->server->Shutdown();
}

TEST(HealthCommandTest, NoServerIsUnreachable) {
  auto server = StartGrpcServer("127.0.0.1", 0, {}, 1, nullptr);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = server->address;
  server->server->Shutdown();
  server->server->Wait();
  server->server.reset();
  EXPECT_EQ(RunHealthCommand(address, Role::kWorker, "", 1000, nullptr), kHealthUnreachable);
}

}  // namespace
}  // namespace ecps
