#include "ps/coded_redundancy.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proto/ecps.pb.h"
#include "ps/tcp_delta_transport.h"
#include "ps/wire_bytes.h"
#include "runtime/error_kind.h"
#include "runtime/retry_policy.h"
#include "runtime/rpc.h"
#include "spdlog/spdlog.h"

namespace ecps {
namespace {

// Shipping a dense update to a replica: every 20 ms, for up to `wait_ms` per tensor, while
// the replica does not answer, answers late or is stopping, or refuses this server's epoch as
// stale (this server follows the newer map meanwhile).
RetryPolicy DenseShipRetry(int wait_ms) {
  RetryPolicy policy;
  policy.initial_backoff = std::chrono::milliseconds(20);
  policy.multiplier = 1;
  policy.max_backoff = policy.initial_backoff;
  policy.deadline = std::chrono::milliseconds(wait_ms);
  policy.codes = {absl::StatusCode::kUnavailable, absl::StatusCode::kDeadlineExceeded,
                  absl::StatusCode::kCancelled};
  policy.kinds = {ErrorKind::kStaleEpoch};
  return policy;
}

}  // namespace

CodedRedundancy::CodedRedundancy(Options options, const Placement& placement, DenseStore* dense,
                                 std::unique_ptr<RowCode> code,
                                 std::unique_ptr<ParityStore> parity,
                                 std::unique_ptr<PeerClient> peers)
    : options_(std::move(options)),
      dense_(dense),
      placement_(placement),
      code_(std::move(code)),
      parity_(std::move(parity)),
      peers_(std::move(peers)) {
  if (options_.test_transport != nullptr) {
    transport_ = options_.test_transport;
  } else if (options_.transport == ParityTransport::kTcp) {
    own_transport_ = std::make_unique<TcpDeltaTransport>(peers_.get(), placement_.servers(),
                                                         options_.ack_timeout_ms);
    transport_ = own_transport_.get();
  } else {
    transport_ = peers_.get();
  }
  auto header = options_.header;
  streams_ = std::make_unique<DeltaStreams>(
      options_.server, placement_.servers(), transport_, options_.streams,
      [header](v1::ParityDeltaBatch* batch) { header(batch->mutable_header()); });
}

CodedRedundancy::~CodedRedundancy() = default;

void CodedRedundancy::Start(Hooks hooks) {
  hooks_ = hooks;
  receiver_ = std::make_unique<ParityReceiver>(options_.server, placement_, parity_.get(), dense_,
                                               std::move(hooks));
  OnlineScrubOptions scrub = options_.scrub;
  scrub.server = options_.server;
  scrub.instance = options_.instance;
  scrub.header = options_.header;
  scrub_ = std::make_unique<OnlineScrub>(std::move(scrub), placement_, code_.get(), parity_.get(),
                                         dense_, peers_.get());
  scrub_->Start();
}

absl::Status CodedRedundancy::ApplyPush(EmbeddingStore& store,
                                        absl::Span<const EmbeddingStore::Rows> tables,
                                        const v1::PushRequest& push) {
  const int k = placement_.k(), r = placement_.r();
  const int servers = placement_.servers();
  std::vector<uint64_t> tickets(servers, 0);
  // Deltas are gathered per parity server and queued once per push.
  std::vector<DeltaStreams::Batch> outgoing(servers);
  const size_t delta_bytes = sizeof(float) * store.payload_floats();
  {
    // Room for the push's deltas, spread over the parity servers: a guess with slack, so
    // that the buffers rarely grow (and copy) while the rows are applied.
    size_t rows = 0;
    for (const EmbeddingStore::Rows& t : tables) rows += t.slots.size();
    const size_t room = (DeltaStreams::Batch::kHeader + delta_bytes) * rows * r * 2 / servers;
    for (DeltaStreams::Batch& b : outgoing) b.packed.reserve(room);
  }
  absl::Status status;
  std::vector<float> grads;
  // With r > 1 the row's delta is written into the first parity server's batch and copied
  // into the others' once the row is done: (first server, its offset, other server, offset).
  struct Copy {
    int from_peer;
    size_t from;
    int to_peer;
    size_t to;
  };
  std::vector<Copy> copies;
  for (size_t i = 0; i < tables.size(); ++i) {
    const std::string& bytes = push.grads(static_cast<int>(i));
    grads.resize(bytes.size() / sizeof(float));
    CopyBytes(grads.data(), bytes.data(), bytes.size());
    const int table = tables[i].table;
    copies.clear();
    status = store.PushWithDeltas(
        tables[i], grads.data(), [&](int64_t row, uint32_t from, uint32_t to) {
          const auto h = DeltaStreams::Batch::Header::ForRow(table, row, k, from, to);
          const int first = placement_.ServerOf(table, h.stripe, k);
          uint8_t* delta = outgoing[first].AddRecord(h, delta_bytes);
          for (int q = 1; q < r; ++q) {
            const int peer = placement_.ServerOf(table, h.stripe, k + q);
            outgoing[peer].AddRecord(h, delta_bytes);
            copies.push_back(Copy{first, outgoing[first].packed.size() - delta_bytes, peer,
                                  outgoing[peer].packed.size() - delta_bytes});
          }
          return delta;
        });
    for (const Copy& c : copies) {
      std::memcpy(outgoing[c.to_peer].packed.data() + c.to,
                  outgoing[c.from_peer].packed.data() + c.from, delta_bytes);
    }
    if (!status.ok()) break;  // rows already applied still send their deltas below
  }
  for (int peer = 0; peer < servers; ++peer) {
    if (outgoing[peer].count > 0) tickets[peer] = streams_->EnqueueBatch(peer, std::move(outgoing[peer]));
  }
  if (!status.ok()) return status;
  if (!options_.ack_after_parity) return absl::OkStatus();
  for (int peer = 0; peer < servers; ++peer) {
    if (tickets[peer] == 0) continue;
    absl::Status s = streams_->WaitAcked(peer, tickets[peer],
                                         std::chrono::milliseconds(options_.ack_timeout_ms));
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status CodedRedundancy::DenseUpdated(int tensor, const std::string& grad, int64_t version,
                                           const std::vector<float>& weights,
                                           const std::vector<float>& state) {
  std::vector<int> replicas = dense_->ReplicasOf(tensor);
  if (replicas.empty()) return absl::OkStatus();
  v1::ReplicateDenseRequest rep;
  options_.header(rep.mutable_header());
  rep.set_tensor(tensor);
  rep.set_version(version);
  rep.set_grad(grad);
  rep.set_from_server(options_.server);
  rep.set_sender_instance(options_.instance);
  // A replica that is down is being replaced: keep shipping (to the replacement's address once
  // the map has it) rather than let primary and replica drift apart.
  Retrier retrier(DenseShipRetry(options_.dense_ship_wait_ms));
  for (int peer : replicas) {
    v1::ReplicateDenseRequest* send = &rep;
    v1::ReplicateDenseRequest catch_up;
    while (true) {
      options_.header(send->mutable_header());  // the epoch may have moved on
      const std::string address = peers_->AddressOf(peer);
      absl::Status s = peers_->ReplicateDense(peer, *send);
      if (s.ok()) break;
      if (send == &rep && HasErrorKind(s, ErrorKind::kReplicaBehind)) {
        // The replica missed an update (the previous primary died between its replicas):
        // send it the whole tensor at this version instead.
        catch_up = rep;
        catch_up.set_snapshot_weights(reinterpret_cast<const char*>(weights.data()),
                                      weights.size() * sizeof(float));
        catch_up.set_snapshot_state(reinterpret_cast<const char*>(state.data()),
                                    state.size() * sizeof(float));
        send = &catch_up;
        spdlog::warn(
            "server {}: dense replica of tensor {} on server {} is behind ({}); "
            "sending it the whole tensor at version {}",
            options_.server, tensor, peer, std::string(s.message()), version);
        continue;
      }
      if (!retrier.ShouldRetry(s)) return s;
      // A stale epoch is an answer; so is any error an ecps handler returned.
      if (options_.report_unreachable && !absl::IsFailedPrecondition(s) && !AnsweredByPeer(s)) {
        options_.report_unreachable(peer, address);
      }
      retrier.Wait();
    }
  }
  return absl::OkStatus();
}

absl::Status CodedRedundancy::Scrub(v1::ScrubParityResponse* response) {
  const int k = placement_.k();
  const size_t bytes = parity_->payload_bytes();
  std::vector<TableStripe> stripes;
  parity_->ForEachStripe([&](int t, int64_t s) { stripes.emplace_back(t, s); });
  constexpr size_t kChunk = 4096;
  std::vector<uint8_t> data(k * bytes * kChunk), expect(bytes * placement_.r()), held(bytes);
  for (size_t begin = 0; begin < stripes.size(); begin += kChunk) {
    size_t end = std::min(stripes.size(), begin + kChunk);
    std::fill(data.begin(), data.end(), 0);
    // Gather the data rows of these stripes, one ReadRows per (server, table).
    std::map<std::pair<int, int>, std::vector<std::pair<int64_t, size_t>>> wanted;
    for (size_t i = begin; i < end; ++i) {
      auto [t, stripe] = stripes[i];
      for (int j = 0; j < k; ++j) {
        int64_t row = stripe * k + j;
        if (row >= placement_.rows(t)) continue;  // padding member: zero
        wanted[{placement_.ServerOf(t, stripe, j), t}].emplace_back(
            row, ((i - begin) * k + j) * bytes);
      }
    }
    for (const auto& [key, rows] : wanted) {
      v1::ReadRowsRequest req;
      options_.header(req.mutable_header());
      req.mutable_rows()->set_table(key.second);
      for (const auto& [row, offset] : rows) req.mutable_rows()->add_rows(row);
      v1::ReadRowsResponse resp;
      absl::Status s = peers_->ReadRows(key.first, req, &resp);
      if (!s.ok()) return s;
      if (resp.payloads().size() != rows.size() * bytes) {
        return absl::InternalError("scrub: server " + std::to_string(key.first) +
                                   " returned a wrong-sized block");
      }
      for (size_t n = 0; n < rows.size(); ++n) {
        std::memcpy(data.data() + rows[n].second, resp.payloads().data() + n * bytes, bytes);
      }
    }
    std::vector<const uint8_t*> dptr(k);
    std::vector<uint8_t*> pptr(placement_.r());
    for (int q = 0; q < placement_.r(); ++q) pptr[q] = expect.data() + q * bytes;
    for (size_t i = begin; i < end; ++i) {
      auto [t, stripe] = stripes[i];
      for (int j = 0; j < k; ++j) dptr[j] = data.data() + ((i - begin) * k + j) * bytes;
      if (absl::Status s = code_->Encode(dptr, pptr, bytes); !s.ok()) return s;
      int q = *parity_->ParityIndex(t, stripe);
      if (absl::Status s = parity_->Read(t, stripe, held.data()); !s.ok()) return s;
      response->set_stripes_checked(response->stripes_checked() + 1);
      if (std::memcmp(held.data(), pptr[q], bytes) != 0) {
        response->set_mismatches(response->mismatches() + 1);
        if (response->examples_size() < 10) {
          response->add_examples(absl::StrCat("table ", t, " stripe ", stripe, " parity ", q,
                                              " on server ", options_.server));
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CodedRedundancy::CheckParityRead(absl::Span<const TableStripe> wanted) const {
  for (const auto& [table, stripe] : wanted) {
    auto q = parity_->ParityIndex(table, stripe);
    if (!q.ok()) return q.status();
  }
  return absl::OkStatus();
}

absl::Status CodedRedundancy::ReadParity(absl::Span<const TableStripe> wanted,
                                         v1::ReadParityResponse* response) const {
  const size_t bytes = parity_->payload_bytes();
  const int k = placement_.k();
  std::string* out = response->mutable_payloads();
  out->resize(bytes * wanted.size());
  response->mutable_versions()->Resize(static_cast<int>(wanted.size()) * k, 0);
  for (size_t i = 0; i < wanted.size(); ++i) {
    bool settled = false;
    absl::Status s = parity_->Read(wanted[i].first, wanted[i].second,
                                   reinterpret_cast<uint8_t*>(out->data()) + i * bytes,
                                   response->mutable_versions()->mutable_data() + i * k,
                                   &settled);
    if (!s.ok()) return s;
    response->add_settled(settled);
  }
  return absl::OkStatus();
}

absl::Status CodedRedundancy::HotRows(const v1::HotRowsRequest& request,
                                      v1::HotRowsResponse* response) const {
  const int servers = placement_.servers();
  if (request.server() < 0 || request.server() >= servers || request.max_rows() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("hot rows of server ", request.server(),
                                                   " (max ", request.max_rows(),
                                                   "): want a server in [0, ", servers,
                                                   ") and max_rows >= 0"));
  }
  for (const ParityStore::Hot& h : parity_->HotRows(request.server(), request.max_rows())) {
    response->add_tables(h.table);
    response->add_rows(h.row);
    response->add_heat(h.heat);
  }
  return absl::OkStatus();
}

absl::Status CodedRedundancy::WriteParity(const v1::WriteParityRequest& request,
                                          UpdateGate& gate) {
  const size_t bytes = parity_->payload_bytes();
  if (request.payloads().size() != bytes * request.stripes_size()) {
    return absl::InvalidArgumentError("parity payloads have the wrong size");
  }
  const int k = placement_.k();
  if (request.versions_size() != k * request.stripes_size()) {
    return absl::InvalidArgumentError(absl::StrCat("parity write of ", request.stripes_size(),
                                                   " stripes has ", request.versions_size(),
                                                   " member versions, expected ",
                                                   k * request.stripes_size()));
  }
  std::vector<uint64_t> keys;
  for (int64_t stripe : request.stripes()) {
    auto q = parity_->ParityIndex(request.table(), stripe);
    if (!q.ok()) return q.status();
    keys.push_back(UpdateGate::StripeKey(request.table(), stripe));
  }
  // Parity is overwritten only where its owner froze updates: else a push between the
  // caller's read and this write would be lost from the parity.
  if (!gate.Holds(request.freeze_id(), request.owner(), keys)) {
    return hooks_.refuse(absl::FailedPreconditionError(absl::StrCat(
                             "parity write of ", request.stripes_size(), " stripes of table ",
                             request.table(), " by '", request.owner(), "' under freeze ",
                             request.freeze_id(), ": the caller holds no live freeze covering "
                             "them")),
                         request.header(), "a parity write");
  }
  for (int i = 0; i < request.stripes_size(); ++i) {
    absl::Status s = parity_->Overwrite(
        request.table(), request.stripes(i),
        reinterpret_cast<const uint8_t*>(request.payloads().data()) + i * bytes,
        request.versions().data() + i * k);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status CodedRedundancy::ReadParityRow(int table, int64_t stripe,
                                            std::vector<uint8_t>* out) const {
  out->resize(parity_->payload_bytes());
  return parity_->Read(table, stripe, out->data());
}

void CodedRedundancy::FillStats(v1::ServerStats* stats) const {
  stats->set_parity_rows(parity_->parity_rows());
  stats->set_parity_version_gaps(parity_->version_gaps());
  stats->set_bytes(stats->bytes() + parity_->bytes());
  stats->set_unacked_deltas(streams_->unacked());
  stats->set_delta_batches_sent_tcp(transport_->tcp_batches());
  if (scrub_ != nullptr) scrub_->FillStats(stats);
  absl::MutexLock lock(&rate_mu_);
  auto now = std::chrono::steady_clock::now();
  int64_t sent = streams_->bytes_sent();
  stats->set_delta_bytes_sent(sent);
  stats->set_delta_batches_sent(streams_->batches_sent());
  double dt = std::chrono::duration<double>(now - rate_time_).count();
  if (dt > 0.2) {
    rate_ = (sent - rate_bytes_) / dt;
    rate_time_ = now;
    rate_bytes_ = sent;
  }
  stats->set_delta_bytes_per_s(rate_);
}

}  // namespace ecps
