// ParameterServerCore's handlers of what peers and the coordinator ask (ps/parameter_server.h):
// the cluster map and peer checks, parity deltas and dense replicas (ParityReceiver),
// freezes, scrubs, and the reads and writes of a rebuild; a dense update's shipping to its
// replicas. The data path (pulls, pushes, row reads) and checkpoints are in
// parameter_server.cc.
#include "ps/parameter_server.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proto/ecps.pb.h"
#include "runtime/error_kind.h"
#include "runtime/retry_policy.h"
#include "runtime/rpc.h"
#include "spdlog/spdlog.h"

namespace ecps {
namespace {

constexpr std::chrono::milliseconds kDefaultLease{30000};
constexpr std::chrono::milliseconds kMaxLease{15 * 60 * 1000};
constexpr std::chrono::milliseconds kFreezeWait{30000};

// Shipping a dense update to a replica: every 20 ms, for up to `wait_ms` (the rebuild wait)
// per tensor, while the replica does not answer, answers late or is stopping, or refuses this
// server's epoch as stale (this server follows the newer map meanwhile).
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

absl::Status ParameterServerCore::ShipDenseUpdate(int tensor, const std::string& grad,
                                                  int64_t version,
                                                  const std::vector<float>& weights,
                                                  const std::vector<float>& state) {
  std::vector<int> replicas = parts_.dense->ReplicasOf(tensor);
  if (replicas.empty() || parts_.peers == nullptr) return absl::OkStatus();
  v1::ReplicateDenseRequest rep;
  FillHeader(rep.mutable_header(), token(), epoch(), "server-" + std::to_string(parts_.server));
  rep.set_tensor(tensor);
  rep.set_version(version);
  rep.set_grad(grad);
  rep.set_from_server(parts_.server);
  rep.set_sender_instance(parts_.instance);
  // A replica that is down is being replaced: keep shipping (to the replacement's address once
  // the map has it) rather than let primary and replica drift apart.
  Retrier retrier(DenseShipRetry(parts_.rebuild_wait_ms));
  for (int peer : replicas) {
    v1::ReplicateDenseRequest* send = &rep;
    v1::ReplicateDenseRequest catch_up;
    while (true) {
      send->mutable_header()->set_epoch(epoch());
      const std::string address = parts_.peers->AddressOf(peer);
      absl::Status s = parts_.peers->ReplicateDense(peer, *send);
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
            parts_.server, tensor, peer, std::string(s.message()), version);
        continue;
      }
      if (!retrier.ShouldRetry(s)) return s;
      // A stale epoch is an answer; so is any error an ecps handler returned.
      if (parts_.report_unreachable && !absl::IsFailedPrecondition(s) && !AnsweredByPeer(s)) {
        parts_.report_unreachable(peer, address);
      }
      retrier.Wait();
    }
  }
  return absl::OkStatus();
}

void ParameterServerCore::FollowMap(const v1::ClusterMap& map) {
  {
    absl::MutexLock lock(&map_mu_);
    if (map.epoch() < members_epoch_) return;
    members_.resize(map.servers_size());
    for (int s = 0; s < map.servers_size(); ++s) {
      members_[s].instance = map.servers(s).instance();
      members_[s].state = map.servers(s).state();
    }
    members_epoch_ = map.epoch();
  }
  // A freeze whose owner the map no longer lists as its id's live holder can never be
  // released by it: the coordinator declared it dead (or gave its id to a replacement).
  const std::vector<UpdateGate::Lease> dropped = gate_.ReleaseIf([&](const UpdateGate::Lease& l) {
    if (l.owner_server < 0 || l.owner_server >= map.servers_size()) return false;
    if (map.epoch() < l.epoch) return false;  // the map is older than the freeze
    const v1::NodeInfo& holder = map.servers(l.owner_server);
    return holder.instance() != l.owner || holder.state() == v1::NODE_DEAD;
  });
  for (const UpdateGate::Lease& l : dropped) {
    spdlog::warn("server {}: released freeze {} of server {} (instance {}): the cluster map "
                 "(epoch {}) says its owner is dead or replaced",
                 parts_.server, l.id, l.owner_server, l.owner, map.epoch());
  }
}

absl::Status ParameterServerCore::CheckPeer(int server, const std::string& instance,
                                            uint64_t epoch, const char* what) const {
  const int servers = parts_.embeddings->placement().servers();
  if (server < 0 || server >= servers || server == parts_.server) {
    return absl::InvalidArgumentError(absl::StrCat(what, " from server ", server,
                                                   ": not a peer of server ", parts_.server,
                                                   " (servers 0..", servers - 1, ")"));
  }
  if (instance.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " from server ", server,
                                                   " names no sender instance"));
  }
  absl::MutexLock lock(&map_mu_);
  if (members_epoch_ == 0 || server >= static_cast<int>(members_.size())) {
    return absl::OkStatus();  // no map followed: nothing to check against
  }
  const Member& m = members_[server];
  if (m.instance == instance && m.state != v1::NODE_DEAD) return absl::OkStatus();
  if (members_epoch_ < epoch) {
    return absl::UnavailableError(absl::StrCat(
        what, " from server ", server, " instance ", instance, " at epoch ", epoch,
        ": not in this server's cluster map yet (epoch ", members_epoch_, ")"));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      what, " from server ", server, " instance ", instance, ": the cluster map (epoch ",
      members_epoch_, ") gives server ", server, " to ",
      m.instance.empty() ? std::string("nobody") : m.instance,
      m.state == v1::NODE_DEAD ? " (dead)" : ""));
}

absl::Status ParameterServerCore::ApplyParityDeltas(const v1::ParityDeltaBatch& batch,
                                                    v1::ParityDeltaAck* ack) {
  if (absl::Status s = CheckRequest(batch.header()); !s.ok()) return s;
  absl::Status applied = receiver_->ApplyDeltas(batch, ack);
  if (applied.ok()) ack->set_tcp_port(tcp_delta_port_.load());
  return applied;
}

absl::Status ParameterServerCore::ReadParityRow(int table, int64_t stripe,
                                                std::vector<uint8_t>* out) const {
  if (!ready() || parts_.parity == nullptr) {
    return absl::FailedPreconditionError("server keeps no parity");
  }
  out->resize(parts_.parity->payload_bytes());
  return parts_.parity->Read(table, stripe, out->data());
}

absl::Status ParameterServerCore::ReplicateDense(const v1::ReplicateDenseRequest& request) {
  if (absl::Status s = CheckRequest(request.header()); !s.ok()) return s;
  return receiver_->ReplicateDense(request);
}

absl::Status ParameterServerCore::Freeze(const v1::FreezeRequest& request) {
  // A release is accepted from an older epoch: whoever froze this server (a checkpoint, a
  // scrub, a rebuild) may see the epoch move on while it works, and a release refused for
  // that would leave the server frozen for good. Releasing changes no data, and only the
  // freeze's owner can release it.
  if (absl::Status s = CheckRequest(request.header(), /*any_epoch=*/!request.freeze());
      !s.ok()) {
    return s;
  }
  const char* what = request.freeze() ? "a freeze" : "a freeze release";
  // A deposed coordinator may not freeze (its release, like any, is accepted).
  if (request.freeze()) {
    if (absl::Status s = CheckCoordinatorTerm(request.header()); !s.ok()) {
      return Refuse(s, request.header(), what);
    }
  }
  if (request.owner().empty()) {
    return Refuse(absl::InvalidArgumentError("freeze without an owner"), request.header(), what);
  }
  if (!request.freeze()) {
    absl::Status s = gate_.Release(request.freeze_id(), request.owner());
    if (absl::IsPermissionDenied(s)) return Refuse(s, request.header(), what);
    return s;
  }
  UpdateGate::Lease lease;
  lease.id = request.freeze_id();
  lease.owner = request.owner();
  lease.epoch = request.header().epoch();
  if (request.has_owner_server()) {
    if (absl::Status s = CheckPeer(request.owner_server(), request.owner(),
                                   request.header().epoch(), "a freeze");
        !s.ok()) {
      return Refuse(s, request.header(), what);
    }
    lease.owner_server = request.owner_server();
  } else if (request.owner() != kCoordinatorFreezeOwner) {
    return Refuse(absl::InvalidArgumentError(absl::StrCat(
                      "freeze owner '", request.owner(), "' is neither a server (owner_server "
                      "unset) nor the coordinator")),
                  request.header(), what);
  }
  const std::chrono::milliseconds lease_ms(request.lease_ms());
  if (lease_ms > kMaxLease) {
    return Refuse(absl::InvalidArgumentError(absl::StrCat("freeze lease of ", request.lease_ms(),
                                                          " ms: at most ", kMaxLease.count())),
                  request.header(), what);
  }
  lease.duration = lease_ms.count() > 0 ? lease_ms : kDefaultLease;
  const Placement& placement = parts_.embeddings->placement();
  for (const v1::TableStripes& t : request.stripes()) {
    for (int64_t stripe : t.stripes()) {
      if (t.table() < 0 || t.table() >= placement.num_tables() || stripe < 0 ||
          stripe >= placement.stripes(t.table())) {
        return Refuse(absl::InvalidArgumentError(absl::StrCat("freeze of table ", t.table(),
                                                              " stripe ", stripe,
                                                              ": no such stripe")),
                      request.header(), what);
      }
      lease.stripes.push_back(UpdateGate::StripeKey(t.table(), stripe));
    }
  }
  const uint64_t id = lease.id;
  if (absl::Status s = gate_.Freeze(std::move(lease), kFreezeWait); !s.ok()) {
    return absl::IsAlreadyExists(s) ? Refuse(s, request.header(), what) : s;
  }
  if (parts_.streams != nullptr) {
    absl::Status s = parts_.streams->Drain(kFreezeWait);
    if (!s.ok()) {
      gate_.Release(id, request.owner()).IgnoreError();
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status ParameterServerCore::ScrubParity(const v1::ScrubParityRequest& request,
                                              v1::ScrubParityResponse* response) {
  if (absl::Status s = CheckRequest(request.header()); !s.ok()) return s;
  if (absl::Status s = CheckCoordinatorTerm(request.header()); !s.ok()) return s;
  if (parts_.parity == nullptr) return absl::OkStatus();
  const Placement& placement = parts_.embeddings->placement();
  const int k = placement.k();
  const size_t bytes = parts_.parity->payload_bytes();
  std::vector<std::pair<int, int64_t>> stripes;
  parts_.parity->ForEachStripe([&](int t, int64_t s) { stripes.emplace_back(t, s); });
  constexpr size_t kChunk = 4096;
  std::vector<uint8_t> data(k * bytes * kChunk), expect(bytes * placement.r()), held(bytes);
  for (size_t begin = 0; begin < stripes.size(); begin += kChunk) {
    size_t end = std::min(stripes.size(), begin + kChunk);
    std::fill(data.begin(), data.end(), 0);
    // Gather the data rows of these stripes, one ReadRows per (server, table).
    std::map<std::pair<int, int>, std::vector<std::pair<int64_t, size_t>>> wanted;
    for (size_t i = begin; i < end; ++i) {
      auto [t, stripe] = stripes[i];
      for (int j = 0; j < k; ++j) {
        int64_t row = stripe * k + j;
        if (row >= placement.rows(t)) continue;  // padding member: zero
        wanted[{placement.ServerOf(t, stripe, j), t}].emplace_back(
            row, ((i - begin) * k + j) * bytes);
      }
    }
    for (const auto& [key, rows] : wanted) {
      v1::ReadRowsRequest req;
      FillHeader(req.mutable_header(), token(), epoch(), "server-" + std::to_string(parts_.server));
      req.mutable_rows()->set_table(key.second);
      for (const auto& [row, offset] : rows) req.mutable_rows()->add_rows(row);
      v1::ReadRowsResponse resp;
      absl::Status s = parts_.peers->ReadRows(key.first, req, &resp);
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
    std::vector<uint8_t*> pptr(placement.r());
    for (int q = 0; q < placement.r(); ++q) pptr[q] = expect.data() + q * bytes;
    for (size_t i = begin; i < end; ++i) {
      auto [t, stripe] = stripes[i];
      for (int j = 0; j < k; ++j) dptr[j] = data.data() + ((i - begin) * k + j) * bytes;
      if (absl::Status s = parts_.code->Encode(dptr, pptr, bytes); !s.ok()) return s;
      int q = *parts_.parity->ParityIndex(t, stripe);
      if (absl::Status s = parts_.parity->Read(t, stripe, held.data()); !s.ok()) return s;
      response->set_stripes_checked(response->stripes_checked() + 1);
      if (std::memcmp(held.data(), pptr[q], bytes) != 0) {
        response->set_mismatches(response->mismatches() + 1);
        if (response->examples_size() < 10) {
          response->add_examples(absl::StrCat("table ", t, " stripe ", stripe, " parity ", q,
                                              " on server ", parts_.server));
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ParameterServerCore::ReadParity(const v1::ReadParityRequest& request,
                                             v1::ReadParityResponse* response) const {
  if (absl::Status s = CheckRequest(request.header()); !s.ok()) return s;
  // (table, stripe) pairs in answer order.
  std::vector<std::pair<int, int64_t>> wanted;
  for (int64_t stripe : request.stripes()) wanted.push_back({request.table(), stripe});
  for (const v1::TableStripes& t : request.tables()) {
    for (int64_t stripe : t.stripes()) wanted.push_back({t.table(), stripe});
  }
  if (absl::Status s = CheckParityRead(wanted); !s.ok()) return s;
  return ReadParityRows(wanted, response);
}

absl::Status ParameterServerCore::CheckParityRead(
    const std::vector<std::pair<int, int64_t>>& wanted) const {
  if (parts_.parity == nullptr) return absl::FailedPreconditionError("server keeps no parity");
  for (const auto& [table, stripe] : wanted) {
    auto q = parts_.parity->ParityIndex(table, stripe);
    if (!q.ok()) return q.status();
  }
  return absl::OkStatus();
}

absl::Status ParameterServerCore::ReadParityRows(const std::vector<std::pair<int, int64_t>>& wanted,
                                                 v1::ReadParityResponse* response) const {
  const size_t bytes = parts_.parity->payload_bytes();
  const int k = parts_.embeddings->placement().k();
  std::string* out = response->mutable_payloads();
  out->resize(bytes * wanted.size());
  response->mutable_versions()->Resize(static_cast<int>(wanted.size()) * k, 0);
  for (size_t i = 0; i < wanted.size(); ++i) {
    bool settled = false;
    absl::Status s = parts_.parity->Read(wanted[i].first, wanted[i].second,
                                         reinterpret_cast<uint8_t*>(out->data()) + i * bytes,
                                         response->mutable_versions()->mutable_data() + i * k,
                                         &settled);
    if (!s.ok()) return s;
    response->add_settled(settled);
  }
  return absl::OkStatus();
}

absl::Status ParameterServerCore::HotRows(const v1::HotRowsRequest& request,
                                          v1::HotRowsResponse* response) const {
  if (absl::Status s = CheckRequest(request.header()); !s.ok()) return s;
  if (parts_.parity == nullptr) return absl::FailedPreconditionError("server keeps no parity");
  const int servers = parts_.embeddings->placement().servers();
  if (request.server() < 0 || request.server() >= servers || request.max_rows() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("hot rows of server ", request.server(),
                                                   " (max ", request.max_rows(),
                                                   "): want a server in [0, ", servers,
                                                   ") and max_rows >= 0"));
  }
  for (const ParityStore::Hot& h : parts_.parity->HotRows(request.server(), request.max_rows())) {
    response->add_tables(h.table);
    response->add_rows(h.row);
    response->add_heat(h.heat);
  }
  return absl::OkStatus();
}

absl::Status ParameterServerCore::WriteParity(const v1::WriteParityRequest& request) {
  if (absl::Status s = CheckRequest(request.header()); !s.ok()) return s;
  if (parts_.parity == nullptr) return absl::FailedPreconditionError("server keeps no parity");
  const size_t bytes = parts_.parity->payload_bytes();
  if (request.payloads().size() != bytes * request.stripes_size()) {
    return absl::InvalidArgumentError("parity payloads have the wrong size");
  }
  const int k = parts_.embeddings->placement().k();
  if (request.versions_size() != k * request.stripes_size()) {
    return absl::InvalidArgumentError(absl::StrCat("parity write of ", request.stripes_size(),
                                                   " stripes has ", request.versions_size(),
                                                   " member versions, expected ",
                                                   k * request.stripes_size()));
  }
  std::vector<uint64_t> keys;
  for (int64_t stripe : request.stripes()) {
    auto q = parts_.parity->ParityIndex(request.table(), stripe);
    if (!q.ok()) return q.status();
    keys.push_back(UpdateGate::StripeKey(request.table(), stripe));
  }
  // Parity is overwritten only where its owner froze updates: else a push between the
  // caller's read and this write would be lost from the parity.
  if (!gate_.Holds(request.freeze_id(), request.owner(), keys)) {
    return Refuse(absl::FailedPreconditionError(absl::StrCat(
                      "parity write of ", request.stripes_size(), " stripes of table ",
                      request.table(), " by '", request.owner(), "' under freeze ",
                      request.freeze_id(), ": the caller holds no live freeze covering them")),
                  request.header(), "a parity write");
  }
  for (int i = 0; i < request.stripes_size(); ++i) {
    absl::Status s = parts_.parity->Overwrite(
        request.table(), request.stripes(i),
        reinterpret_cast<const uint8_t*>(request.payloads().data()) + i * bytes,
        request.versions().data() + i * k);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ParameterServerCore::ReadDense(const v1::ReadDenseRequest& request,
                                            v1::ReadDenseResponse* response) const {
  if (absl::Status s = CheckRequest(request.header()); !s.ok()) return s;
  if (parts_.rebuilder != nullptr && !parts_.rebuilder->dense_ready()) {
    return absl::UnavailableError("dense tensors not restored yet");
  }
  std::vector<float> weights, state;
  int64_t version = 0;
  absl::Status s = parts_.dense->Snapshot(request.tensor(), &weights, &state, &version);
  if (!s.ok()) return s;
  response->set_weights(reinterpret_cast<const char*>(weights.data()),
                        weights.size() * sizeof(float));
  response->set_state(reinterpret_cast<const char*>(state.data()), state.size() * sizeof(float));
  response->set_version(version);
  return absl::OkStatus();
}

absl::Status ParameterServerCore::DenseChecksums(const v1::DenseChecksumsRequest& request,
                                                 v1::DenseChecksumsResponse* response) const {
  if (absl::Status s = CheckRequest(request.header()); !s.ok()) return s;
  if (absl::Status s = CheckCoordinatorTerm(request.header()); !s.ok()) return s;
  for (int t = 0; t < parts_.dense->num_tensors(); ++t) {
    if (!parts_.dense->Holds(t)) continue;
    v1::DenseChecksum* c = response->add_tensors();
    uint64_t sum = 0;
    int64_t version = 0;
    if (absl::Status s = parts_.dense->Checksum(t, &sum, &version); !s.ok()) return s;
    c->set_tensor(t);
    c->set_checksum(sum);
    c->set_version(version);
    c->set_primary(parts_.dense->Owns(t));
  }
  return absl::OkStatus();
}

}  // namespace ecps
