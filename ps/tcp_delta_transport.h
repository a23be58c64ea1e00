// The parity transport of fault_tolerance.parity_transport: tcp. Each peer server listens for
// parity batches on a second port (TcpDeltaListener, ps/tcp_deltas.h) and offers it in every
// gRPC ack; once a peer has offered one, batches go to it over one plain TCP connection,
// serialized as for gRPC. Until then, and after any failure of the connection (not a refusal,
// which is the peer's answer), batches go over gRPC (the peer client), which also tells a dead
// peer; the port is taken up again after a wait that doubles with each failure in a row.
// Thread-safe.
#ifndef ECPS_PS_TCP_DELTA_TRANSPORT_H_
#define ECPS_PS_TCP_DELTA_TRANSPORT_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "ps/delta_stream.h"
#include "ps/peer_client.h"
#include "ps/tcp_deltas.h"
#include "runtime/retry_policy.h"

namespace ecps {

class TcpDeltaTransport final : public DeltaTransport {
 public:
  // `grpc` (which must outlive this) reaches the peers until they offer a port, and names
  // their hosts; `servers` is the number of server ids.
  TcpDeltaTransport(PeerClient* grpc, int servers, int rpc_timeout_ms);

  absl::StatusOr<uint64_t> Send(int peer, const v1::ParityDeltaBatch& batch) override {
    return grpc_->Send(peer, batch);
  }
  absl::StatusOr<uint64_t> SendPacked(int peer, const v1::ParityDeltaBatch& batch,
                                      std::shared_ptr<const std::string> packed) override;
  std::string AddressOf(int peer) override { return grpc_->AddressOf(peer); }
  void PeerMoved(int peer) override;
  int64_t tcp_batches() override;

 private:
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
  // `mu` guards the port and is held only briefly (PeerMoved runs on the thread that follows
  // the map); `send_mu` is held through a send.
  struct Peer {
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
  // The TCP send: true when it was tried and `*result` is its outcome (an answer of the
  // peer's, good or bad); false to send over gRPC.
  bool SendOverTcp(int peer, const v1::ParityDeltaBatch& batch, const std::string& head,
                   const std::string& records, absl::StatusOr<uint64_t>* result);
  // After a gRPC ack from `peer`, reached at `address`, that offered `port`.
  void LearnPort(int peer, const std::string& address, int port);

  PeerClient* const grpc_;
  const int rpc_timeout_ms_;
  std::vector<std::unique_ptr<Peer>> peers_;  // per server id
};

}  // namespace ecps

#endif  // ECPS_PS_TCP_DELTA_TRANSPORT_H_
