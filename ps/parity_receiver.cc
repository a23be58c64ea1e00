#include "ps/parity_receiver.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proto/ecps.pb.h"
#include "ps/delta_stream.h"
#include "ps/wire_bytes.h"

namespace ecps {

ParityReceiver::ParityReceiver(int server, const Placement& placement, ParityStore* parity,
                               DenseStore* dense, Hooks hooks)
    : server_(server),
      placement_(placement),
      parity_(parity),
      dense_(dense),
      hooks_(std::move(hooks)),
      senders_(std::make_unique<Sender[]>(placement.servers())) {}

uint64_t ParityReceiver::applied(int sender) const {
  if (sender < 0 || sender >= placement_.servers()) return 0;
  const Sender& s = senders_[sender];
  absl::MutexLock lock(&s.mu);
  return s.applied;
}

void AppendPackedDeltas(const std::string& packed, size_t delta_bytes,
                        std::vector<ParityStore::DeltaRef>* deltas) {
  const size_t record = DeltaStreams::Batch::kHeader + delta_bytes;
  const char* p = packed.data();
  for (size_t off = 0; off + record <= packed.size(); off += record) {
    const DeltaStreams::Batch::Header h = DeltaStreams::Batch::ReadHeader(p + off);
    const char* delta = p + off + DeltaStreams::Batch::kHeader;
    deltas->push_back(ParityStore::DeltaRef{h.table, h.j, h.stripe,
                                            reinterpret_cast<const uint8_t*>(delta), h.from,
                                            h.to});
  }
}

namespace {

// The deltas of `batch` from server batch.from_server() (`bytes` each), listed and packed,
// into *deltas; INVALID_ARGUMENT when one has the wrong size or is for a data row its sender
// does not hold (only the server holding a data row sends its deltas).
absl::Status DecodeDeltas(const v1::ParityDeltaBatch& batch, const Placement& placement,
                          size_t bytes, std::vector<ParityStore::DeltaRef>* deltas) {
  using Delta = ParityStore::DeltaRef;
  const int from = batch.from_server();
  const size_t record = DeltaStreams::Batch::kHeader + bytes;
  deltas->reserve(batch.deltas_size() + batch.packed().size() / record);
  for (const v1::ParityDelta& d : batch.deltas()) {
    if (d.delta().size() != bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("parity delta of ", d.delta().size(), " bytes, expected ", bytes));
    }
    deltas->push_back(Delta{d.table(), d.j(), d.stripe(),
                            reinterpret_cast<const uint8_t*>(d.delta().data()), d.from_version(),
                            d.to_version()});
  }
  if (!batch.packed().empty()) {
    if (static_cast<size_t>(batch.delta_bytes()) != bytes || batch.packed().size() % record != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("packed parity deltas of ", batch.delta_bytes(), " bytes in ",
                       batch.packed().size(), " bytes; expected ", bytes, "-byte deltas"));
    }
    AppendPackedDeltas(batch.packed(), bytes, deltas);
  }
  // Only the server holding a data row sends its deltas.
  for (const Delta& d : *deltas) {
    if (d.table < 0 || d.table >= placement.num_tables() || d.stripe < 0 ||
        d.stripe >= placement.stripes(d.table) || d.j < 0 || d.j >= placement.k() ||
        placement.ServerOf(d.table, d.stripe, d.j) != from) {
      return absl::InvalidArgumentError(absl::StrCat("parity delta for table ", d.table, " stripe ",
                                                     d.stripe, " member ", d.j, " from server ",
                                                     from, ", which does not hold that data row"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ParityReceiver::ApplyDeltas(const v1::ParityDeltaBatch& batch,
                                         v1::ParityDeltaAck* ack) {
  if (parity_ == nullptr) {
    return absl::FailedPreconditionError("server " + std::to_string(server_) +
                                         " keeps no parity (mode without erasure coding)");
  }
  const int from = batch.from_server();
  if (absl::Status s = hooks_.check_peer(from, batch.sender_instance(), batch.header().epoch(),
                                         "parity deltas");
      !s.ok()) {
    return hooks_.refuse(s, batch.header(), "parity deltas");
  }
  auto refuse = [&](absl::Status status) {
    return hooks_.refuse(std::move(status), batch.header(), "parity deltas");
  };
  if (from < 0 || from >= placement_.servers()) {
    // CheckPeer refuses these first; a receiver never keeps state for a made-up sender.
    return refuse(absl::InvalidArgumentError(absl::StrCat("parity deltas from server ", from,
                                                          ": no such server")));
  }
  if (batch.seq() == 0 || batch.seq() == UINT64_MAX) {
    return refuse(absl::InvalidArgumentError(absl::StrCat(
        "parity batch from server ", from, " has sequence number ", batch.seq(),
        ": streams count from 1 and never wrap")));
  }
  // Decoded and checked before the sequence state is touched: a batch that is refused
  // changes nothing.
  std::vector<ParityStore::DeltaRef> deltas;
  if (absl::Status s = DecodeDeltas(batch, placement_, parity_->payload_bytes(), &deltas);
      !s.ok()) {
    return refuse(std::move(s));
  }
  Sender& sender = senders_[from];
  absl::MutexLock lock(&sender.mu);
  uint64_t applied;
  bool restart = false;
  if (!sender.known) {
    // A sender this server has not heard from (this server is a replacement itself, or
    // the stream's first batch): its stream is taken up where it is.
    restart = true;
    applied = batch.seq() - 1;
  } else if (sender.instance != batch.sender_instance()) {
    // A new incarnation of the sender (a replacement data server): its streams start at
    // 1. What the old streams carried is already in the rows the rebuild read.
    if (batch.seq() != 1) {
      return refuse(absl::FailedPreconditionError(absl::StrCat(
          "parity batch ", batch.seq(), " from a new instance ", batch.sender_instance(),
          " of server ", from, ": a new instance's stream starts at 1")));
    }
    restart = true;
    applied = 0;
  } else {
    applied = sender.applied;
  }
  if (batch.seq() <= applied) {  // a resend after a lost ack: already applied
    ack->set_applied_seq(applied);
    return absl::OkStatus();
  }
  if (batch.seq() != applied + 1) {
    return refuse(absl::FailedPreconditionError(absl::StrCat(
        "parity batch ", batch.seq(), " from server ", from, " out of order: applied up to ",
        applied)));
  }
  if (absl::Status s = parity_->ApplyBatch(deltas); !s.ok()) return s;
  if (restart) {
    sender.known = true;
    sender.instance = batch.sender_instance();
  }
  sender.applied = batch.seq();
  ack->set_applied_seq(batch.seq());
  return absl::OkStatus();
}

absl::Status ParityReceiver::ReplicateDense(const v1::ReplicateDenseRequest& request) {
  auto refuse = [&](absl::Status status) {
    return hooks_.refuse(std::move(status), request.header(), "a dense replica update");
  };
  if (request.grad().size() % sizeof(float) != 0) {
    return absl::InvalidArgumentError("dense replica gradient size is not a multiple of 4");
  }
  if (request.tensor() < 0 || request.tensor() >= dense_->num_tensors()) {
    return absl::InvalidArgumentError(absl::StrCat("dense replica update of tensor ",
                                                   request.tensor(), ": no such tensor"));
  }
  // Only the primary orders a tensor's updates: one from anyone else would fork the replica.
  const int primary = dense_->PrimaryOf(request.tensor());
  if (request.from_server() != primary) {
    return refuse(absl::FailedPreconditionError(absl::StrCat(
        "dense replica update of tensor ", request.tensor(), " from server ",
        request.from_server(), ", which is not its primary (server ", primary, ")")));
  }
  if (absl::Status s = hooks_.check_peer(request.from_server(), request.sender_instance(),
                                         request.header().epoch(), "a dense replica update");
      !s.ok()) {
    return refuse(s);
  }
  if (FirstNonFinite(request.grad()) >= 0) {
    return refuse(absl::InvalidArgumentError(absl::StrCat(
        "dense replica update of tensor ", request.tensor(), " has a non-finite gradient")));
  }
  if (!hooks_.dense_ready()) {
    // The restore copies the primary while it is frozen, after this update: nothing is lost.
    return absl::OkStatus();
  }
  if (!request.snapshot_weights().empty()) {
    return dense_->CatchUpReplica(request.tensor(), request.version(),
                                  request.snapshot_weights(), request.snapshot_state());
  }
  std::vector<float> grad(request.grad().size() / sizeof(float));
  CopyBytes(grad.data(), request.grad().data(), request.grad().size());
  return dense_->ApplyReplica(request.tensor(), request.version(), grad.data(),
                              static_cast<int64_t>(grad.size()));
}

}  // namespace ecps
