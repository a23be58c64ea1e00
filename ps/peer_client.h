// Calls from one parameter server to its peers: parity delta batches (the production
// DeltaTransport), dense replica updates, row reads for scrubbing, and what a rebuild asks
// of its peers (the production StripeSource). Channels come from the
// cluster map's server addresses. Thread-safe.
//
// With `tcp` (fault_tolerance.parity_transport: tcp), parity batches go over plain TCP
// (ps/tcp_deltas.h) to each peer that offered a port in a gRPC ack, and over gRPC until then
// and after any failure of the connection.
#ifndef ECPS_PS_PEER_CLIENT_H_
#define ECPS_PS_PEER_CLIENT_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "proto/ecps.grpc.pb.h"
#include "ps/delta_stream.h"
#include "ps/stripe_source.h"
#include "ps/tcp_deltas.h"
#include "runtime/retry_policy.h"

namespace ecps {

class PeerClient : public DeltaTransport, public StripeSource {
 public:
  PeerClient(std::vector<std::string> addresses, int rpc_timeout_ms, bool tcp = false);

  absl::StatusOr<uint64_t> Send(int peer, const v1::ParityDeltaBatch& batch) override;
  // Sends the records without copying them: the message is the serialized batch, then the
  // records' field tag and length, then `packed` itself as a grpc slice that keeps it alive.
  // The bytes are those Send puts on the wire for the batch with the records as `packed`,
  // with field 6 after the others (any order parses the same).
  absl::StatusOr<uint64_t> SendPacked(int peer, const v1::ParityDeltaBatch& batch,
                                      std::shared_ptr<const std::string> packed) override;
  // What SendPacked puts before the records: `batch` serialized, then (for records_bytes > 0)
  // field 6's tag and length.
  static std::string EncodeDeltaHead(const v1::ParityDeltaBatch& batch, size_t records_bytes);
  absl::Status ReplicateDense(int peer, const v1::ReplicateDenseRequest& request);
  absl::Status ReadRows(int peer, const v1::ReadRowsRequest& request,
                        v1::ReadRowsResponse* response);
  // ReadRows to several peers at once, from the calling thread: requests[i] goes to peers[i],
  // its answer to (*responses)[i], how it went to (*statuses)[i]. The calls share one
  // completion queue, so no other thread is woken to make them (a rebuild reads from every
  // survivor dozens of times a second). Each is retried on UNAVAILABLE as ReadRows is.
  void ReadRowsFromEach(const std::vector<int>& peers,
                        const std::vector<v1::ReadRowsRequest>& requests,
                        std::vector<v1::ReadRowsResponse>* responses,
                        std::vector<absl::Status>* statuses) override;
  absl::Status WriteParity(int peer, const v1::WriteParityRequest& request) override;
  absl::Status HotRows(int peer, const v1::HotRowsRequest& request,
                       v1::HotRowsResponse* response) override;
  absl::Status ReadDense(int peer, const v1::ReadDenseRequest& request,
                         v1::ReadDenseResponse* response) override;
  absl::Status Freeze(int peer, const v1::FreezeRequest& request) override;
  // Parity batches sent over TCP so far, to every peer (0 without `tcp`).
  int64_t tcp_batches();
  // Points `peer` at a new address (a replacement server).
  void SetAddress(int peer, const std::string& address) ABSL_LOCKS_EXCLUDED(mu_);
  std::string AddressOf(int peer) override ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // The stub is shared: SetAddress may replace it while a call is using it.
  std::shared_ptr<v1::ParameterServer::Stub> StubFor(int peer) ABSL_LOCKS_EXCLUDED(mu_);
  // A peer's channel and its ApplyParityDeltas method, for SendPacked's raw call.
  struct RawDeltas {
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<grpc::internal::RpcMethod> method;
  };
  std::shared_ptr<const RawDeltas> RawDeltasFor(int peer) ABSL_LOCKS_EXCLUDED(mu_);
  static std::shared_ptr<const RawDeltas> MakeRawDeltas(std::shared_ptr<grpc::Channel> channel);

  // After a TCP connection to a peer failed, parity goes over gRPC for 1 s, then 2 s, 4 s ...
  // up to 10 min per failure in a row before the port it offers is taken up again.
  static RetryPolicy TcpRetry() {
    RetryPolicy policy;
    policy.initial_backoff = std::chrono::seconds(1);
    policy.multiplier = 2;
    policy.max_backoff = std::chrono::minutes(10);
    return policy;
  }
  // One peer's TCP connection for parity batches, and the port it offered (0: none yet).
  // `mu` guards the port and is held only briefly (SetAddress runs on the thread that follows
  // the map); `send_mu` is held through a send.
  struct TcpPeer {
    absl::Mutex mu;
    std::string host ABSL_GUARDED_BY(mu);
    int port ABSL_GUARDED_BY(mu) = 0;
    // Failures in a row: each doubles the wait before the port is taken up again.
    Retrier retry ABSL_GUARDED_BY(mu){TcpRetry()};
    std::chrono::steady_clock::time_point retry_after ABSL_GUARDED_BY(mu);
    int64_t sent ABSL_GUARDED_BY(mu) = 0;
    absl::Mutex send_mu ABSL_ACQUIRED_BEFORE(mu);
    TcpDeltaConnection connection ABSL_GUARDED_BY(send_mu);
  };
  // The TCP send of SendPacked: true when it was tried and `*result` is its outcome (an
  // answer of the peer's, good or bad); false to send over gRPC.
  bool SendOverTcp(int peer, const v1::ParityDeltaBatch& batch, const std::string& head,
                   const std::string& records, absl::StatusOr<uint64_t>* result);
  // After a gRPC ack from `peer`, reached at `address`, that offered `port`.
  void LearnTcpPort(int peer, const std::string& address, int port);

  const int rpc_timeout_ms_;
  std::vector<std::unique_ptr<TcpPeer>> tcp_;  // per peer; empty without `tcp`
  absl::Mutex mu_;
  std::vector<std::shared_ptr<v1::ParameterServer::Stub>> stubs_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<const RawDeltas>> raw_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> addresses_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ecps

#endif  // ECPS_PS_PEER_CLIENT_H_
