#include "cli/operator_call.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "absl/strings/str_cat.h"

namespace ecps {
namespace {

// How long each probe of a failed call's address may take.
constexpr int kProbeTimeoutMs = 1000;

// Codes gRPC itself gives when the transport fails; any other comes from a server.
bool TransportCode(absl::StatusCode code) {
  return code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kDeadlineExceeded ||
         code == absl::StatusCode::kCancelled || code == absl::StatusCode::kUnknown ||
         code == absl::StatusCode::kInternal;
}

std::string GrpcWords(const absl::Status& status) {
  return absl::StrCat(" [", absl::StatusCodeToString(status.code()), ": ", status.message(), "]");
}

std::string CannotConnect(const CallFacts& facts, const std::string& address) {
  std::string why;
  switch (facts.tcp) {
    case TcpProbe::kUnresolved:
      why = "its host name does not resolve (or it is not host:port)";
      break;
    case TcpProbe::kRefused:
      why =
          "nothing listens there (connection refused): is the job running, and is this its "
          "address (DIR/coordinator.address)?";
      break;
    case TcpProbe::kNoAnswer:
      why = "its host does not answer (down, unreachable, or a firewall drops the connection)";
      break;
    case TcpProbe::kAccepted:
      why = "it accepts TCP connections but no gRPC channel came up";
      break;
  }
  return absl::StrCat("cannot connect to the coordinator at ", address, ": ", why);
}

std::string ConnectionLost(const CallFacts& facts, const std::string& address) {
  return absl::StrCat(
      "connection lost mid-call: the coordinator at ", address,
      " was reached, then the connection broke",
      facts.tcp == TcpProbe::kAccepted
          ? " (it listens again: restarted?)"
          : ", and nothing listens there any more: it exited (its log in the job's logs/ says "
            "why)",
      "; whether the call took effect is unknown");
}

std::string TlsMismatch(const CallFacts& facts, const std::string& address) {
  if (!facts.client_tls) {
    return absl::StrCat(
        "TLS expected: the coordinator at ", address,
        " answers only TLS (the job has security.tls) and this command spoke plaintext: give an "
        "admin certificate with --tls-ca, --tls-cert and --tls-key (or ECPS_TLS_CA, "
        "ECPS_TLS_CERT, ECPS_TLS_KEY), or use --job DIR");
  }
  return absl::StrCat("plaintext expected: the coordinator at ", address,
                      " answers only plaintext (the job has no security.tls) and this command "
                      "spoke TLS: leave out --tls-* and ECPS_TLS_*");
}

std::string Refused(const CallFacts& facts, const std::string& address,
                    const absl::Status& status) {
  if (!facts.answered) {
    return absl::StrCat("refused: the TLS handshake with the coordinator at ", address,
                        " failed: is its certificate from the same CA as this command's, with "
                        "CN=coordinator, and this command's an admin's of that CA (CN=admin)?");
  }
  std::string hint;
  if (facts.code == absl::StatusCode::kUnauthenticated) {
    hint = " (the job's admin token: --token, ECPS_TOKEN, or --job DIR)";
  } else if (facts.code == absl::StatusCode::kPermissionDenied) {
    hint = " (an admin's credential is needed)";
  }
  return absl::StrCat("refused by the coordinator at ", address, ": ",
                      absl::StatusCodeToString(status.code()), ": ", status.message(), hint);
}

}  // namespace

CallFailure ClassifyCallFailure(const CallFacts& facts) {
  if (facts.answered) return CallFailure::kRefused;
  if (facts.tcp != TcpProbe::kAccepted) {
    return facts.connected ? CallFailure::kConnectionLost : CallFailure::kCannotConnect;
  }
  // Something listens: is it of the other transport security?
  if (facts.server_tls.has_value() && *facts.server_tls != facts.client_tls) {
    return CallFailure::kTlsMismatch;
  }
  if (facts.connected) {
    return facts.code == absl::StatusCode::kDeadlineExceeded ? CallFailure::kNoAnswer
                                                             : CallFailure::kConnectionLost;
  }
  // Never connected to a listener of the same kind: two TLS ends that refused each other's
  // certificates, or a listener that is no coordinator.
  if (facts.client_tls && facts.server_tls == std::optional<bool>(true)) {
    return CallFailure::kRefused;
  }
  return facts.code == absl::StatusCode::kDeadlineExceeded ? CallFailure::kNoAnswer
                                                           : CallFailure::kCannotConnect;
}

int CallFailureExitCode(CallFailure kind, const CallFacts& facts) {
  if (kind != CallFailure::kRefused) return kStatusUnreachable;
  return facts.code == absl::StatusCode::kUnauthenticated ? kStatusBadToken : kStatusError;
}

std::string CallFailureLine(CallFailure kind, const CallFacts& facts, const std::string& address,
                            const absl::Status& status) {
  std::string line;
  switch (kind) {
    case CallFailure::kCannotConnect:
      line = CannotConnect(facts, address);
      break;
    case CallFailure::kConnectionLost:
      line = ConnectionLost(facts, address);
      break;
    case CallFailure::kTlsMismatch:
      line = TlsMismatch(facts, address);
      break;
    case CallFailure::kRefused:
      // The coordinator's own words are the message; gRPC's are only for the others.
      return Refused(facts, address, status);
    case CallFailure::kNoAnswer:
      line = absl::StrCat("no answer from the coordinator at ", address,
                          " within the deadline: it accepts connections but does not reply "
                          "(stopped, or overloaded?)");
      break;
  }
  return line + GrpcWords(status);
}

OperatorCall::OperatorCall(std::string address, const TlsIdentity* tls)
    : address_(std::move(address)),
      tls_(tls != nullptr),
      channel_(MakeChannel(address_, Role::kCoordinator, tls)),
      stub_(v1::Coordinator::NewStub(channel_)) {}

grpc_connectivity_state OperatorCall::Connect(int timeout_ms) {
  const auto deadline = std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms);
  grpc_connectivity_state state = channel_->GetState(/*try_to_connect=*/true);
  while (state == GRPC_CHANNEL_IDLE || state == GRPC_CHANNEL_CONNECTING) {
    if (!channel_->WaitForStateChange(state, deadline)) break;
    state = channel_->GetState(/*try_to_connect=*/true);
  }
  return state;
}

absl::Status OperatorCall::Call(const RpcOptions& rpc,
                                const std::function<grpc::Status(grpc::ClientContext*)>& call) {
  if (!tried_) {
    tried_ = true;
    const int timeout_ms = std::min(rpc.deadline_ms, 10000);
    const grpc_connectivity_state state = Connect(timeout_ms);
    connected_ = state == GRPC_CHANNEL_READY;
    if (state == GRPC_CHANNEL_IDLE || state == GRPC_CHANNEL_CONNECTING) {
      // Still trying: a call would only wait out its own deadline on top.
      return absl::DeadlineExceededError(
          absl::StrCat("no connection within ", timeout_ms / 1000.0, " s"));
    }
  }
  return CallWithRetry(rpc, call);
}

CallFacts OperatorCall::Diagnose(const absl::Status& status) const {
  CallFacts facts;
  facts.code = status.code();
  facts.answered = AnsweredByPeer(status) || !TransportCode(status.code());
  facts.connected = connected_;
  facts.client_tls = tls_;
  if (facts.answered) return facts;
  facts.tcp = ProbeTcp(address_, kProbeTimeoutMs);
  if (facts.tcp == TcpProbe::kAccepted) facts.server_tls = AnswersTls(address_, kProbeTimeoutMs);
  return facts;
}

int OperatorCall::Fail(const std::string& command, const absl::Status& status) const {
  const CallFacts facts = Diagnose(status);
  const CallFailure kind = ClassifyCallFailure(facts);
  std::fprintf(stderr, "ecps %s: %s\n", command.c_str(),
               CallFailureLine(kind, facts, address_, status).c_str());
  return CallFailureExitCode(kind, facts);
}

}  // namespace ecps
