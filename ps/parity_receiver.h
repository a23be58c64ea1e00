// The receiving side of the streams between servers: parity delta batches at a parity
// holder (sent by ps/delta_stream.h) and dense replica updates at a tensor's replica (sent by
// its primary). ParameterServerCore checks the request header and hands the rest here.
// Thread-safe.
//
// Delta batches are applied per sender (a server id) in sequence order, each exactly once: a
// resend of an applied batch is acknowledged again and applies nothing; a gap in the
// sequence is FAILED_PRECONDITION (the sender keeps resending its oldest unacknowledged
// batch). The first batch heard from a sender starts its stream where it is (this server is a
// replacement, or the stream is new); a new incarnation of the sender (another instance)
// starts again at 1 and nowhere else. Numbers 0 and 2^64-1 are refused (streams count from 1
// and never wrap). The whole batch is decoded and validated (delta sizes; only the server
// holding a data row sends its deltas) before the sequence state is read or any delta
// applies, so a refused batch changes nothing.
#ifndef ECPS_PS_PARITY_RECEIVER_H_
#define ECPS_PS_PARITY_RECEIVER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "ps/dense_store.h"
#include "ps/parity_store.h"
#include "domain/placement.h"

namespace ecps {
namespace v1 {
class ParityDeltaAck;
class ParityDeltaBatch;
class ReplicateDenseRequest;
class RequestHeader;
}  // namespace v1

// Appends a DeltaRef for each record of `packed` (DeltaStreams::Batch's layout: a header and
// `delta_bytes` delta bytes each; the caller checked that it holds whole records). The refs
// point into `packed`.
void AppendPackedDeltas(const std::string& packed, size_t delta_bytes,
                        std::vector<ParityStore::DeltaRef>* deltas);

class ParityReceiver {
 public:
  // What the receiver asks of the server it is part of.
  struct Hooks {
    // OK when `instance` holds server id `server` now, for a request of `epoch`
    // (ParameterServerCore::CheckPeer); its error refuses the request.
    std::function<absl::Status(int server, const std::string& instance, uint64_t epoch,
                               const char* what)>
        check_peer;
    // Counts and logs a refused request; returns `status` (ParameterServerCore::Refuse).
    std::function<absl::Status(absl::Status status, const v1::RequestHeader& header,
                               const char* what)>
        refuse;
    // False while this server (a replacement) has not restored its dense tensors: replica
    // updates are then dropped (the restore copies the primary after them).
    std::function<bool()> dense_ready;
  };

  // `server` is this server's id. `parity` may be null (a mode without parity: every batch
  // is FAILED_PRECONDITION). `placement`, `parity` and `dense` must outlive the receiver.
  ParityReceiver(int server, const Placement& placement, ParityStore* parity, DenseStore* dense,
                 Hooks hooks);

  // Applies a batch of parity deltas (see above); *ack gets the highest sequence number
  // applied from the sender.
  absl::Status ApplyDeltas(const v1::ParityDeltaBatch& batch, v1::ParityDeltaAck* ack);
  // Applies a dense replica update, only from the tensor's primary, with a finite gradient:
  // the update that makes `version` (or, with a snapshot, the primary's whole tensor).
  absl::Status ReplicateDense(const v1::ReplicateDenseRequest& request);

  // The highest sequence number applied from `sender` (0: none yet, or a bad id).
  uint64_t applied(int sender) const;

 private:
  // One sender's stream. Its mutex is held for the whole of a batch: one batch of a sender
  // at a time, so sequence order is the apply order.
  struct Sender {
    mutable absl::Mutex mu;
    bool known ABSL_GUARDED_BY(mu) = false;  // a batch of it was applied
    std::string instance ABSL_GUARDED_BY(mu);
    uint64_t applied ABSL_GUARDED_BY(mu) = 0;
  };

  const int server_;
  const Placement& placement_;
  ParityStore* const parity_;
  DenseStore* const dense_;
  const Hooks hooks_;
  // One per server id (never for made-up senders: the id is checked first).
  const std::unique_ptr<Sender[]> senders_;
};

}  // namespace ecps

#endif  // ECPS_PS_PARITY_RECEIVER_H_
