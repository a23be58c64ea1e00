// Which failure an operator command says it met: the classification (pure) and the lines.
// Real coordinators, killed mid-call, behind TLS or absent: tests/e2e_test.cc.
#include "cli/operator_call.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/socket_test_util.h"

namespace ecps {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

using Code = absl::StatusCode;

CallFacts Transport(Code code, bool connected, TcpProbe tcp,
                    std::optional<bool> server_tls = std::nullopt, bool client_tls = false) {
  CallFacts f;
  f.code = code;
  f.connected = connected;
  f.tcp = tcp;
  f.server_tls = server_tls;
  f.client_tls = client_tls;
  return f;
}

CallFacts Answered(Code code) {
  CallFacts f;
  f.code = code;
  f.answered = true;
  return f;
}

TEST(ClassifyCallFailureTest, NothingThereIsCannotConnect) {
  EXPECT_EQ(ClassifyCallFailure(Transport(Code::kUnavailable, false, TcpProbe::kRefused)),
            CallFailure::kCannotConnect);
  EXPECT_EQ(ClassifyCallFailure(Transport(Code::kUnavailable, false, TcpProbe::kUnresolved)),
            CallFailure::kCannotConnect);
  EXPECT_EQ(ClassifyCallFailure(Transport(Code::kDeadlineExceeded, false, TcpProbe::kNoAnswer)),
            CallFailure::kCannotConnect);
}

TEST(ClassifyCallFailureTest, ABreakAfterConnectingIsConnectionLost) {
  // The coordinator died during the call: nothing listens when the command looks.
  EXPECT_EQ(ClassifyCallFailure(Transport(Code::kUnavailable, true, TcpProbe::kRefused)),
            CallFailure::kConnectionLost);
  // Over TLS too: the break is no TLS matter.
  EXPECT_EQ(ClassifyCallFailure(Transport(Code::kUnavailable, true, TcpProbe::kRefused,
                                          std::nullopt, /*client_tls=*/true)),
            CallFailure::kConnectionLost);
  // It listens again, speaking what this command speaks: the connection was lost all the same.
  EXPECT_EQ(ClassifyCallFailure(Transport(Code::kUnavailable, true, TcpProbe::kAccepted, false)),
            CallFailure::kConnectionLost);
}

TEST(ClassifyCallFailureTest, TheOtherTransportSecurityIsATlsMismatch) {
  // A plaintext command and a TLS coordinator, whether or not the channel came up first.
  for (bool connected : {false, true}) {
    EXPECT_EQ(
        ClassifyCallFailure(Transport(Code::kUnavailable, connected, TcpProbe::kAccepted, true)),
        CallFailure::kTlsMismatch);
  }
  // A TLS command and a plaintext coordinator.
  EXPECT_EQ(
      ClassifyCallFailure(Transport(Code::kUnavailable, false, TcpProbe::kAccepted, false, true)),
      CallFailure::kTlsMismatch);
}

TEST(ClassifyCallFailureTest, AnAnswerIsARefusal) {
  for (Code code : {Code::kUnauthenticated, Code::kPermissionDenied, Code::kFailedPrecondition,
                    Code::kUnavailable, Code::kInternal}) {
    EXPECT_EQ(ClassifyCallFailure(Answered(code)), CallFailure::kRefused) << code;
  }
  // Two TLS ends that refuse each other's certificates never connect.
  EXPECT_EQ(
      ClassifyCallFailure(Transport(Code::kUnavailable, false, TcpProbe::kAccepted, true, true)),
      CallFailure::kRefused);
}

TEST(ClassifyCallFailureTest, SilenceOnAConnectionIsNoAnswer) {
  EXPECT_EQ(ClassifyCallFailure(Transport(Code::kDeadlineExceeded, true, TcpProbe::kAccepted)),
            CallFailure::kNoAnswer);
  EXPECT_EQ(
      ClassifyCallFailure(Transport(Code::kDeadlineExceeded, true, TcpProbe::kAccepted, false)),
      CallFailure::kNoAnswer);
}

TEST(CallFailureExitCodeTest, TokenRefusalsAreThreeOtherRefusalsOneTheRestTwo) {
  EXPECT_EQ(CallFailureExitCode(CallFailure::kRefused, Answered(Code::kUnauthenticated)),
            kStatusBadToken);
  EXPECT_EQ(CallFailureExitCode(CallFailure::kRefused, Answered(Code::kPermissionDenied)),
            kStatusError);
  for (CallFailure kind : {CallFailure::kCannotConnect, CallFailure::kConnectionLost,
                           CallFailure::kTlsMismatch, CallFailure::kNoAnswer}) {
    EXPECT_EQ(CallFailureExitCode(kind, Transport(Code::kUnavailable, false, TcpProbe::kRefused)),
              kStatusUnreachable);
  }
}

TEST(CallFailureLineTest, EachLineNamesItsKindAndOnlyAMismatchTalksOfCertificates) {
  const std::string at = "10.0.0.1:7000";
  const absl::Status closed = absl::UnavailableError("Socket closed");
  auto line = [&](const CallFacts& f, const absl::Status& s = absl::UnavailableError("x")) {
    return CallFailureLine(ClassifyCallFailure(f), f, at, s);
  };
  const std::string lost = line(Transport(Code::kUnavailable, true, TcpProbe::kRefused), closed);
  EXPECT_THAT(lost, StartsWith("connection lost mid-call: the coordinator at 10.0.0.1:7000"));
  EXPECT_THAT(lost, HasSubstr("[UNAVAILABLE: Socket closed]"));
  EXPECT_THAT(lost, Not(HasSubstr("tls")));
  EXPECT_THAT(line(Transport(Code::kUnavailable, false, TcpProbe::kRefused)),
              StartsWith("cannot connect to the coordinator at 10.0.0.1:7000: nothing listens"));
  EXPECT_THAT(line(Transport(Code::kUnavailable, false, TcpProbe::kUnresolved)),
              HasSubstr("does not resolve"));
  const std::string tls = line(Transport(Code::kUnavailable, true, TcpProbe::kAccepted, true));
  EXPECT_THAT(tls, StartsWith("TLS expected: the coordinator at 10.0.0.1:7000 answers only TLS"));
  EXPECT_THAT(tls, HasSubstr("--tls-ca, --tls-cert and --tls-key"));
  EXPECT_THAT(line(Transport(Code::kUnavailable, false, TcpProbe::kAccepted, false, true)),
              StartsWith("plaintext expected: "));
  EXPECT_THAT(
      line(Answered(Code::kUnauthenticated), absl::UnauthenticatedError("wrong token from cli")),
      "refused by the coordinator at 10.0.0.1:7000: UNAUTHENTICATED: wrong token from "
      "cli (the job's admin token: --token, ECPS_TOKEN, or --job DIR)");
  EXPECT_THAT(line(Transport(Code::kDeadlineExceeded, true, TcpProbe::kAccepted)),
              StartsWith("no answer from the coordinator at 10.0.0.1:7000"));
}

// Nothing listens: the call fails, and the probe says so.
TEST(OperatorCallTest, NothingListeningIsCannotConnect) {
  testing::LoopbackListener listener;
  const std::string address = listener.address();
  listener.Close();  // the port refuses from now on
  OperatorCall call(address, /*tls=*/nullptr);
  v1::StatusResponse response;
  const absl::Status status = call.Call(RpcOptions{}, [&](grpc::ClientContext* context) {
    return call.stub()->Status(context, v1::StatusRequest(), &response);
  });
  ASSERT_FALSE(status.ok());
  const CallFacts facts = call.Diagnose(status);
  EXPECT_FALSE(facts.connected);
  EXPECT_EQ(facts.tcp, TcpProbe::kRefused);
  EXPECT_EQ(ClassifyCallFailure(facts), CallFailure::kCannotConnect);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(call.Fail("status", status), kStatusUnreachable);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              StartsWith("ecps status: cannot connect to the coordinator at " + address));
}

}  // namespace
}  // namespace ecps
