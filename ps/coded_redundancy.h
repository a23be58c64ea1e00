// The redundancy of fault_tolerance.mode erasure_code and replication (ps/redundancy.h): one
// row code for both (replication is the code with k = 1, r copies). A pushed row's delta (old
// XOR new payload) is taken under the row's lock while the row is updated, gathered per parity
// holder and sent on that holder's delta stream (ps/delta_stream.h) over the parity transport
// the job chose (gRPC, or TCP: ps/tcp_deltas.h). With ack after_parity a push returns only
// once every parity holder applied its deltas, so an acknowledged update survives any r
// server failures; with async it returns after the local apply. A dense tensor's update is
// shipped to its replicas, retried until each has it.
//
// The peer side: parity deltas and replica updates from other servers (ParityReceiver),
// scrubs, and the parity reads and writes of a rebuild.
#ifndef ECPS_PS_CODED_REDUNDANCY_H_
#define ECPS_PS_CODED_REDUNDANCY_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "ps/delta_stream.h"
#include "ps/dense_store.h"
#include "ps/online_scrub.h"
#include "ps/parity_receiver.h"
#include "ps/parity_store.h"
#include "ps/peer_client.h"
#include "ps/redundancy.h"
#include "ps/row_code.h"
#include "runtime/spec.h"

namespace ecps {

class CodedRedundancy final : public Redundancy {
 public:
  struct Options {
    int server = 0;
    std::string instance;  // this process's incarnation (stamped on what it sends)
    bool ack_after_parity = true;
    int ack_timeout_ms = 30000;    // how long a push waits for parity acknowledgements
    int dense_ship_wait_ms = 60000;  // per tensor, how long a replica is waited for
    // Told about a peer server that looks down (a failed RPC to it); may be empty.
    UnreachableFn report_unreachable;
    // Fills the header of a request this server sends its peers (token, epoch, sender).
    std::function<void(v1::RequestHeader*)> header;
    // How parity batches travel (chosen here, once): gRPC calls through the peer client, or
    // plain TCP (TcpDeltaTransport). `test_transport`, when set, replaces both (tests put
    // faults on the network there) and must outlive this object.
    ParityTransport transport = ParityTransport::kGrpc;
    DeltaTransport* test_transport = nullptr;
    DeltaStreamOptions streams;
    // The online scrub (fault_tolerance.scrub); server, instance and header are filled here.
    OnlineScrubOptions scrub;
  };
  // The parts are built by BuildServerParts (ps/server_parts.cc); `placement` (the store's)
  // and `dense` must outlive this object.
  CodedRedundancy(Options options, const Placement& placement, DenseStore* dense,
                  std::unique_ptr<RowCode> code, std::unique_ptr<ParityStore> parity,
                  std::unique_ptr<PeerClient> peers);
  ~CodedRedundancy() override;

  // What a replacement's Rebuilder reads and writes.
  const RowCode* code() const { return code_.get(); }
  ParityStore* parity() { return parity_.get(); }
  PeerClient* peers() { return peers_.get(); }
  // Set by Start.
  OnlineScrub* online_scrub() { return scrub_.get(); }

  void Start(Hooks hooks) override;
  bool rebuilds() const override { return true; }
  std::string backend() const override { return code_->backend(); }
  int64_t parity_rows() const override { return parity_->parity_rows(); }

  absl::Status ApplyPush(EmbeddingStore& store, absl::Span<const EmbeddingStore::Rows> tables,
                         const v1::PushRequest& push) override;
  absl::Status DenseUpdated(int tensor, const std::string& grad, int64_t version,
                            const std::vector<float>& weights,
                            const std::vector<float>& state) override;
  absl::Status Drain(std::chrono::milliseconds timeout) override {
    return streams_->Drain(timeout);
  }
  void BeforeRebuildRead(int rebuilder) override { streams_->StopCoalescing(rebuilder); }

  absl::Status ApplyDeltas(const v1::ParityDeltaBatch& batch, v1::ParityDeltaAck* ack) override {
    return receiver_->ApplyDeltas(batch, ack);
  }
  absl::Status ReplicateDense(const v1::ReplicateDenseRequest& request) override {
    return receiver_->ReplicateDense(request);
  }
  absl::Status Scrub(v1::ScrubParityResponse* response) override;
  absl::Status CheckParityRead(absl::Span<const TableStripe> wanted) const override;
  absl::Status ReadParity(absl::Span<const TableStripe> wanted,
                          v1::ReadParityResponse* response) const override;
  absl::Status WriteParity(const v1::WriteParityRequest& request,
                           UpdateGate& gate) override;
  absl::Status HotRows(const v1::HotRowsRequest& request,
                       v1::HotRowsResponse* response) const override;
  absl::Status ReadParityRow(int table, int64_t stripe,
                             std::vector<uint8_t>* out) const override;
  absl::Status FlipParityBit(int table, int64_t stripe, int64_t bit) override {
    return parity_->FlipBit(table, stripe, bit);
  }

  void SetPeerAddress(int server, const std::string& address) override {
    peers_->SetAddress(server, address);
    transport_->PeerMoved(server);
  }
  void FillStats(v1::ServerStats* stats) const override ABSL_LOCKS_EXCLUDED(rate_mu_);

 private:
  const Options options_;
  DenseStore* const dense_;
  const Placement& placement_;
  // Declared in the order they are built: the streams' sender threads (destroyed first) use
  // the transport and the peers, the receiver the parity store.
  const std::unique_ptr<RowCode> code_;
  const std::unique_ptr<ParityStore> parity_;
  const std::unique_ptr<PeerClient> peers_;
  std::unique_ptr<DeltaTransport> own_transport_;  // the TCP transport, when chosen
  DeltaTransport* transport_;                      // the one the streams send over
  std::unique_ptr<DeltaStreams> streams_;
  std::unique_ptr<ParityReceiver> receiver_;  // set by Start
  Hooks hooks_;
  // Set by Start; reads the parity store and the peers (declared after them: stopped first).
  std::unique_ptr<OnlineScrub> scrub_;

  // The delta bytes rate that FillStats reports.
  mutable absl::Mutex rate_mu_;
  mutable std::chrono::steady_clock::time_point rate_time_ ABSL_GUARDED_BY(rate_mu_) =
      std::chrono::steady_clock::now();
  mutable int64_t rate_bytes_ ABSL_GUARDED_BY(rate_mu_) = 0;
  mutable double rate_ ABSL_GUARDED_BY(rate_mu_) = 0;
};

}  // namespace ecps

#endif  // ECPS_PS_CODED_REDUNDANCY_H_
