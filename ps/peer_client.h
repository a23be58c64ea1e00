// Calls from one parameter server to its peers: parity delta batches (the production
// DeltaTransport), dense replica updates, row reads for scrubbing, and what a rebuild asks
// of its peers (the production StripeSource). Channels come from the
// cluster map's server addresses. Thread-safe.
//
// As a DeltaTransport it sends parity batches as gRPC calls (fault_tolerance.parity_transport:
// grpc); TcpDeltaTransport (ps/tcp_delta_transport.h) is the other transport, and uses this
// one until a peer offers it a TCP port.
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

namespace ecps {

class PeerClient : public DeltaTransport, public StripeSource {
 public:
  PeerClient(std::vector<std::string> addresses, int rpc_timeout_ms);

  absl::StatusOr<uint64_t> Send(int peer, const v1::ParityDeltaBatch& batch) override;
  // Sends the records without copying them: the message is the serialized batch, then the
  // records' field tag and length, then `packed` itself as a grpc slice that keeps it alive.
  // The bytes are those Send puts on the wire for the batch with the records as `packed`,
  // with field 6 after the others (any order parses the same).
  absl::StatusOr<uint64_t> SendPacked(int peer, const v1::ParityDeltaBatch& batch,
                                      std::shared_ptr<const std::string> packed) override {
    return SendPackedOverGrpc(peer, batch, std::move(packed), nullptr);
  }
  // SendPacked, also telling (when `tcp_port` is set) the TCP port the peer offered in its
  // ack (0: none).
  absl::StatusOr<uint64_t> SendPackedOverGrpc(int peer, const v1::ParityDeltaBatch& batch,
                                              std::shared_ptr<const std::string> packed,
                                              int* tcp_port);
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
  absl::Status WriteRows(int peer, const v1::WriteRowsRequest& request) override;
  absl::Status DenseChecksums(int peer, const v1::DenseChecksumsRequest& request,
                              v1::DenseChecksumsResponse* response) override;
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

  const int rpc_timeout_ms_;
  absl::Mutex mu_;
  std::vector<std::shared_ptr<v1::ParameterServer::Stub>> stubs_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<const RawDeltas>> raw_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> addresses_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ecps

#endif  // ECPS_PS_PEER_CLIENT_H_
