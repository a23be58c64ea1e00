// RPC plumbing shared by every role: status translation, channels, deadlines and retries,
// request headers (job token + epoch), and starting a gRPC server on a free port.
//
// absl::StatusCode values equal grpc::StatusCode values, so a status crosses the wire with
// its code intact: a server handler returns ToGrpcStatus(absl_status) and a client gets the
// same code back from FromGrpcStatus, with the error's kind (runtime/error_kind.h).
#ifndef ECPS_RUNTIME_RPC_H_
#define ECPS_RUNTIME_RPC_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/grpcpp.h"
#include "runtime/retry_policy.h"
#include "runtime/security.h"

namespace ecps {
namespace v1 {
class ClusterMap;
class RequestHeader;
}

// Largest message any ecps channel or server accepts (rows are packed into few messages).
inline constexpr int kMaxMessageBytes = 256 << 20;

// The owner the coordinator names in its freezes (FreezeRequest.owner); servers name their
// instance.
inline constexpr char kCoordinatorFreezeOwner[] = "coordinator";

// The error's kind (runtime/error_kind.h) travels in the gRPC status's error details, beside
// the AnsweredByPeer mark; the message travels as it is.
grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

// True when the error came from an ecps handler, i.e. from a live process: ToGrpcStatus marks
// every error it returns (in the status's error details), and FromGrpcStatus keeps the mark.
// gRPC itself reports a peer that is gone (nothing listens, a reset connection) as
// UNAVAILABLE, the same code a live server answers while it is still initialising or a row
// is not rebuilt yet; only the former is a reason to report the peer failed.
bool AnsweredByPeer(const grpc::Status& status);
bool AnsweredByPeer(const absl::Status& status);
// An error a live peer answered with over another transport (ps/tcp_deltas.h), marked as
// FromGrpcStatus marks it.
absl::Status AnsweredByPeerStatus(absl::StatusCode code, std::string_view message);

// A channel to `address` (host:port) with ecps' message-size limits and keepalive. With TLS
// (`tls`, by default this process's: runtime/security.h) it presents this process's
// certificate and accepts only a peer whose certificate chains to the job's CA and names
// `peer`, the role the caller means to reach.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address, Role peer,
                                           const TlsIdentity* tls = ProcessTls());

// Brings `channel` to READY by `deadline`, polling while it connects: a synchronous call that
// fails fast never polls a connection attempt along, so a channel that once failed (a standby
// coordinator that did not listen yet, a restarted etcd member) may otherwise stay failed.
// False at once when a connection attempt fails (nothing listens), or at the deadline. For
// clients that move between several addresses; a single-address client waits for ready.
bool WaitForConnection(grpc::Channel* channel, std::chrono::system_clock::time_point deadline);

struct RpcOptions {
  int deadline_ms = 10000;      // per attempt
  int max_attempts = 5;         // attempts on UNAVAILABLE (1 or less: no retry)
  int initial_backoff_ms = 20;  // doubled after each UNAVAILABLE, capped at max_backoff_ms
  int max_backoff_ms = 1000;
};

// The retry policy of `options` (runtime/retry_policy.h): UNAVAILABLE only, the attempts and
// the doubling backoff it names.
RetryPolicy RpcRetryPolicy(const RpcOptions& options);

// Calls `call` with a fresh ClientContext carrying a deadline, and retries under
// RpcRetryPolicy(options) while it returns UNAVAILABLE. Returns the last status. Every other
// error (and OK) returns at once: only UNAVAILABLE means the request surely did not take
// effect.
absl::Status CallWithRetry(const RpcOptions& options,
                           const std::function<grpc::Status(grpc::ClientContext*)>& call);

// Fills a request header.
void FillHeader(v1::RequestHeader* header, std::string_view token, uint64_t epoch,
                std::string_view sender);

// What a coordinator's request to a server carries besides its credential: the epoch of the
// map it acts on and its own term, which a server checks against the highest it has seen
// (docs/recovery.md, "Fencing a deposed coordinator").
struct CoordinatorStamp {
  uint64_t epoch = 0;
  uint64_t term = 0;
};
// The stamp of a coordinator acting on `map` (the map carries its publisher's term).
CoordinatorStamp StampOf(const v1::ClusterMap& map);
// Fills a coordinator's request header.
void FillHeader(v1::RequestHeader* header, std::string_view token, const CoordinatorStamp& stamp,
                std::string_view sender);


// A running gRPC server.
struct GrpcServer {
  // A server with no services of its own (a worker's: health only) answers every other
  // method UNIMPLEMENTED through this; gRPC refuses to start a server without one. Declared
  // before `server`, which must go first.
  std::unique_ptr<grpc::CallbackGenericService> unimplemented;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  std::string address;  // host:port
};

// Starts a server for `services` on host:port (port 0 picks a free port). `threads` bounds
// the synchronous handler threads. The services must outlive the server. Every server also
// serves grpc.health.v1 (runtime/health.h); with no services, only that. With TLS (`tls`,
// by default this process's) it accepts only clients whose certificate chains to the CA.
absl::StatusOr<GrpcServer> StartGrpcServer(const std::string& host, int port,
                                           const std::vector<grpc::Service*>& services,
                                           int threads = 4,
                                           const TlsIdentity* tls = ProcessTls());

// "host:port" -> host and port; INVALID_ARGUMENT when it is not of that form.
absl::Status SplitHostPort(const std::string& address, std::string* host, int* port);

}  // namespace ecps

#endif  // ECPS_RUNTIME_RPC_H_
