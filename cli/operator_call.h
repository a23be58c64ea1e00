// How an operator command (`ecps status|scrub|kill|checkpoint`) calls the coordinator, and
// which failure it says it met. Five kinds, told apart by the gRPC code, whether an ecps
// handler answered (AnsweredByPeer: a payload, never the message text), whether the channel
// had connected before the call and, for a failure of the transport only, by probing the
// address afterwards (runtime/peer_probe.h):
//   cannot connect            no connection was made: nothing listens (refused), the host does
//                             not answer, or its name does not resolve
//   connection lost mid-call  the channel had connected, then the connection broke: the
//                             coordinator died (nothing listens any more) or went away
//   TLS mismatch              the listener speaks TLS and the command plaintext ("TLS
//                             expected"), or the reverse ("plaintext expected")
//   refused                   the coordinator answered with an error (UNAUTHENTICATED,
//                             PERMISSION_DENIED, FAILED_PRECONDITION ...), or the TLS handshake
//                             between two TLS ends failed (the certificates)
//   no answer                 connected and listening, but no reply within the deadline (a
//                             stopped or overloaded coordinator)
// Not thread-safe.
#ifndef ECPS_CLI_OPERATOR_CALL_H_
#define ECPS_CLI_OPERATOR_CALL_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "cli/operator_exit_codes.h"
#include "proto/ecps.grpc.pb.h"
#include "runtime/peer_probe.h"
#include "runtime/rpc.h"
#include "runtime/security.h"

namespace ecps {

enum class CallFailure { kCannotConnect, kConnectionLost, kTlsMismatch, kRefused, kNoAnswer };

// What is known about a failed call.
struct CallFacts {
  absl::StatusCode code = absl::StatusCode::kUnknown;
  // The code came from a live server: an ecps handler's (AnsweredByPeer), or one only a
  // server gives (UNIMPLEMENTED, PERMISSION_DENIED ...), never UNAVAILABLE, DEADLINE_EXCEEDED,
  // CANCELLED, UNKNOWN or INTERNAL of gRPC's own.
  bool answered = false;
  bool connected = false;   // the channel was ready before the call
  bool client_tls = false;  // the command spoke TLS
  // Probed after a failure of the transport (not for an answered one).
  TcpProbe tcp = TcpProbe::kAccepted;
  std::optional<bool> server_tls;  // AnswersTls
};

// Which failure the facts describe. Pure.
CallFailure ClassifyCallFailure(const CallFacts& facts);

// The exit code of a command that met `kind` (cli/status_command.h's): kStatusBadToken for a
// refused token (UNAUTHENTICATED), kStatusError for another refusal, kStatusUnreachable for
// the rest.
int CallFailureExitCode(CallFailure kind, const CallFacts& facts);

// One line for the operator that starts with the kind ("cannot connect", "connection lost
// mid-call", "TLS expected" or "plaintext expected", "refused", "no answer"), then says what
// it means at `address` and what to do, then gRPC's own words (`status`). Pure.
std::string CallFailureLine(CallFailure kind, const CallFacts& facts, const std::string& address,
                            const absl::Status& status);

class OperatorCall {
 public:
  // A channel to the coordinator at `address` with `tls` (null: plaintext).
  explicit OperatorCall(std::string address, const TlsIdentity* tls = ProcessTls());

  v1::Coordinator::Stub* stub() { return stub_.get(); }

  // The first time, waits for the channel to be ready (or to fail to connect, or for the
  // deadline of one attempt, at most 10 s: DEADLINE_EXCEEDED, and no call), so that a
  // failure can say whether the coordinator was ever reached; then `call` under
  // CallWithRetry(`rpc`).
  absl::Status Call(const RpcOptions& rpc,
                    const std::function<grpc::Status(grpc::ClientContext*)>& call);

  // After Call returned `status` (not OK): the facts, with the probes of the address for a
  // failure of the transport (a second or two at most).
  CallFacts Diagnose(const absl::Status& status) const;

  // Prints "ecps COMMAND: " and CallFailureLine on stderr for `status` (not OK); returns the
  // exit code (CallFailureExitCode).
  int Fail(const std::string& command, const absl::Status& status) const;

 private:
  // Asks the channel to connect; its state once ready, failed, or `timeout_ms` passed.
  grpc_connectivity_state Connect(int timeout_ms);

  const std::string address_;
  const bool tls_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
  bool tried_ = false;
  bool connected_ = false;
};

}  // namespace ecps

#endif  // ECPS_CLI_OPERATOR_CALL_H_
