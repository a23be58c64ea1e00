// How a parameter server keeps what it holds recoverable, apart from how it handles requests
// (ps/parameter_server.h). The core admits a request, validates it, waits at the update gate,
// and hands the update to its Redundancy: what happens when rows or a dense tensor were
// updated, how a push waits until its update is durable, and the peer side of it (parity
// deltas and dense replica updates applied here, scrubs, the parity reads and writes of a
// rebuild).
//
// Two implementations, chosen once when the server builds its parts (ps/server_parts.h):
// - NoRedundancy (below): fault_tolerance.mode none or checkpoint. Updates are only applied;
//   a lost server is recovered by rolling every server back to a checkpoint. Every peer
//   request about parity or replicas is FAILED_PRECONDITION.
// - CodedRedundancy (ps/coded_redundancy.h): erasure_code and replication, one row code for
//   both (replication is the code with k = 1). Each updated row's delta goes to its r parity
//   holders over the job's parity transport; dense updates go to the tensor's replicas.
#ifndef ECPS_PS_REDUNDANCY_H_
#define ECPS_PS_REDUNDANCY_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "ps/embedding_store.h"
#include "ps/parity_receiver.h"
#include "ps/update_gate.h"

namespace ecps {
namespace v1 {
class HotRowsRequest;
class HotRowsResponse;
class ParityDeltaAck;
class ParityDeltaBatch;
class PushRequest;
class ReadParityResponse;
class ReplicateDenseRequest;
class RequestHeader;
class ScrubParityResponse;
class ServerStats;
class WriteParityRequest;
}  // namespace v1

// A (table, stripe) pair, as the parity reads name them.
using TableStripe = std::pair<int, int64_t>;

class Redundancy {
 public:
  // What a redundancy asks of the server it is part of: the peer checks, the refusal count
  // and whether the dense tensors are restored (ParameterServerCore's), as its receiver does.
  using Hooks = ParityReceiver::Hooks;

  virtual ~Redundancy() = default;

  // Called once, by ParameterServerCore::Install, before any request arrives.
  virtual void Start(Hooks hooks) = 0;
  // Whether a lost server is rebuilt from its peers (else it is restored by rollback).
  virtual bool rebuilds() const = 0;
  // The row code's backend ("isal", "cuda", ...), or "none".
  virtual std::string backend() const = 0;
  virtual int64_t parity_rows() const = 0;

  // ---- What the server does when it updated something ----

  // Applies a push to `store`: tables[i] (validated and resolved) with the gradients in
  // push.grads(i) (bytes of floats). Returns once the update is as durable as the job's
  // fault_tolerance.ack promises. With a code, each row's delta is taken under the row's lock
  // while the row is updated, which is why the store's update goes through here. After an
  // error the rows already applied are still made redundant; the error is returned.
  virtual absl::Status ApplyPush(EmbeddingStore& store,
                                 absl::Span<const EmbeddingStore::Rows> tables,
                                 const v1::PushRequest& push) = 0;
  // A dense update made `version` of `tensor` (gradient `grad`, bytes of floats; `weights`
  // and `state` are the tensor after it): ships it to the tensor's replicas.
  virtual absl::Status DenseUpdated(int tensor, const std::string& grad, int64_t version,
                                    const std::vector<float>& weights,
                                    const std::vector<float>& state) = 0;
  // Waits until every update shipped so far is acknowledged (a freeze's consistent point).
  virtual absl::Status Drain(std::chrono::milliseconds timeout) = 0;
  // Called before this server serves a rebuild's read of its rows to server `rebuilder`.
  virtual void BeforeRebuildRead(int rebuilder) = 0;

  // ---- The peer side (the core checked the request header first) ----

  virtual absl::Status ApplyDeltas(const v1::ParityDeltaBatch& batch,
                                   v1::ParityDeltaAck* ack) = 0;
  virtual absl::Status ReplicateDense(const v1::ReplicateDenseRequest& request) = 0;
  // Checks every parity row held here against a fresh encode of its stripe's data rows, read
  // from their servers. Meaningful only while every server is frozen.
  virtual absl::Status Scrub(v1::ScrubParityResponse* response) = 0;
  // Whether this server holds the parity of every stripe in `wanted`; then the rows with
  // their member versions, in order.
  virtual absl::Status CheckParityRead(absl::Span<const TableStripe> wanted) const = 0;
  virtual absl::Status ReadParity(absl::Span<const TableStripe> wanted,
                                  v1::ReadParityResponse* response) const = 0;
  // Overwrites parity rows, only where `gate` shows the caller's live freeze covering them.
  virtual absl::Status WriteParity(const v1::WriteParityRequest& request,
                                   UpdateGate& gate) = 0;
  virtual absl::Status HotRows(const v1::HotRowsRequest& request,
                               v1::HotRowsResponse* response) const = 0;
  // The parity row held here of (table, stripe) (tests; recovery reads).
  virtual absl::Status ReadParityRow(int table, int64_t stripe,
                                     std::vector<uint8_t>* out) const = 0;
  // Fault injection (ParameterServerCore::InjectFault): flips bit `bit` of that parity row.
  virtual absl::Status FlipParityBit(int table, int64_t stripe, int64_t bit) = 0;

  // ---- Operations ----

  // Server `server` moved to `address` (a replacement).
  virtual void SetPeerAddress(int server, const std::string& address) = 0;
  virtual void FillStats(v1::ServerStats* stats) const = 0;
};

// fault_tolerance.mode none or checkpoint: nothing is redundant.
class NoRedundancy final : public Redundancy {
 public:
  explicit NoRedundancy(int server) : server_(server) {}
  void Start(Hooks hooks) override { hooks_ = std::move(hooks); }
  bool rebuilds() const override { return false; }
  std::string backend() const override { return "none"; }
  int64_t parity_rows() const override { return 0; }

  absl::Status ApplyPush(EmbeddingStore& store, absl::Span<const EmbeddingStore::Rows> tables,
                         const v1::PushRequest& push) override;
  absl::Status DenseUpdated(int, const std::string&, int64_t, const std::vector<float>&,
                            const std::vector<float>&) override {
    return absl::OkStatus();
  }
  absl::Status Drain(std::chrono::milliseconds) override { return absl::OkStatus(); }
  void BeforeRebuildRead(int) override {}

  // Refused and counted: no server of such a job sends them.
  absl::Status ApplyDeltas(const v1::ParityDeltaBatch& batch, v1::ParityDeltaAck*) override;
  absl::Status ReplicateDense(const v1::ReplicateDenseRequest& request) override;
  absl::Status Scrub(v1::ScrubParityResponse*) override { return absl::OkStatus(); }
  absl::Status CheckParityRead(absl::Span<const TableStripe>) const override { return NoParity(); }
  absl::Status ReadParity(absl::Span<const TableStripe>, v1::ReadParityResponse*) const override {
    return NoParity();
  }
  absl::Status WriteParity(const v1::WriteParityRequest&, UpdateGate&) override {
    return NoParity();
  }
  absl::Status HotRows(const v1::HotRowsRequest&, v1::HotRowsResponse*) const override {
    return NoParity();
  }
  absl::Status ReadParityRow(int, int64_t, std::vector<uint8_t>*) const override {
    return NoParity();
  }
  absl::Status FlipParityBit(int, int64_t, int64_t) override { return NoParity(); }

  void SetPeerAddress(int, const std::string&) override {}
  void FillStats(v1::ServerStats*) const override {}

 private:
  static absl::Status NoParity() {
    return absl::FailedPreconditionError("server keeps no parity");
  }

  const int server_;
  Hooks hooks_;
};

}  // namespace ecps

#endif  // ECPS_PS_REDUNDANCY_H_
