// ProbeTcp and AnswersTls against real sockets on loopback (a TLS server: tests/security_test.cc).
#include "runtime/peer_probe.h"

#include <chrono>
#include <string>

#include "gtest/gtest.h"
#include "runtime/rpc.h"
#include "runtime/socket_test_util.h"

namespace ecps {
namespace {

using testing::LoopbackListener;

TEST(ProbeTcpTest, TellsAListenerFromAClosedPort) {
  LoopbackListener listener;
  const std::string address = listener.address();
  EXPECT_EQ(ProbeTcp(address, 1000), TcpProbe::kAccepted);
  listener.Close();
  EXPECT_EQ(ProbeTcp(address, 1000), TcpProbe::kRefused);
}

TEST(ProbeTcpTest, AnAddressThatDoesNotResolveIsUnresolved) {
  EXPECT_EQ(ProbeTcp("no-port", 100), TcpProbe::kUnresolved);
  EXPECT_EQ(ProbeTcp("127.0.0.1:", 100), TcpProbe::kUnresolved);
  EXPECT_EQ(ProbeTcp("no-such-host.invalid:7000", 100), TcpProbe::kUnresolved);
}

TEST(AnswersTlsTest, APlaintextGrpcServerDoesNot) {
  auto server = StartGrpcServer("127.0.0.1", 0, {}, 1, /*tls=*/nullptr);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ(AnswersTls(server->address, 2000), std::optional<bool>(false));
  server->server->Shutdown();
}

TEST(AnswersTlsTest, NoVerdictWithoutAnAnswer) {
  LoopbackListener silent;  // accepts (in the kernel), never answers
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(AnswersTls(silent.address(), 300), std::nullopt);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  const std::string address = silent.address();
  silent.Close();
  EXPECT_EQ(AnswersTls(address, 300), std::nullopt);
}

}  // namespace
}  // namespace ecps
