// ParameterServerCore's handlers of what peers and the coordinator ask (ps/parameter_server.h):
// the cluster map and peer checks, freezes, and the requests the server's Redundancy answers
// (parity deltas and dense replicas, scrubs, the reads and writes of a rebuild), each after
// the checks of its header. The data path (pulls, pushes, row reads) and checkpoints are in
// parameter_server.cc.
#include "ps/parameter_server.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cstdlib>
#include <map>
#include <string_view>
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

}  // namespace

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
  absl::Status applied = parts_.redundancy->ApplyDeltas(batch, ack);
  if (applied.ok()) ack->set_tcp_port(tcp_delta_port_.load());
  return applied;
}

absl::Status ParameterServerCore::ReadParityRow(int table, int64_t stripe,
                                                std::vector<uint8_t>* out) const {
  if (!ready()) return absl::FailedPreconditionError("server keeps no parity");
  return parts_.redundancy->ReadParityRow(table, stripe, out);
}

absl::Status ParameterServerCore::ReplicateDense(const v1::ReplicateDenseRequest& request) {
  if (absl::Status s = CheckRequest(request.header()); !s.ok()) return s;
  return parts_.redundancy->ReplicateDense(request);
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
  if (absl::Status s = parts_.redundancy->Drain(kFreezeWait); !s.ok()) {
    gate_.Release(id, request.owner()).IgnoreError();
    return s;
  }
  return absl::OkStatus();
}

absl::Status ParameterServerCore::ScrubParity(const v1::ScrubParityRequest& request,
                                              v1::ScrubParityResponse* response) {
  if (absl::Status s = CheckRequest(request.header()); !s.ok()) return s;
  if (absl::Status s = CheckCoordinatorTerm(request.header()); !s.ok()) return s;
  return parts_.redundancy->Scrub(response);
}

absl::Status ParameterServerCore::ReadParity(const v1::ReadParityRequest& request,
                                             v1::ReadParityResponse* response) const {
  if (absl::Status s = CheckRequest(request.header()); !s.ok()) return s;
  // (table, stripe) pairs in answer order.
  std::vector<TableStripe> wanted;
  for (int64_t stripe : request.stripes()) wanted.push_back({request.table(), stripe});
  for (const v1::TableStripes& t : request.tables()) {
    for (int64_t stripe : t.stripes()) wanted.push_back({t.table(), stripe});
  }
  if (absl::Status s = parts_.redundancy->CheckParityRead(wanted); !s.ok()) return s;
  return parts_.redundancy->ReadParity(wanted, response);
}

absl::Status ParameterServerCore::HotRows(const v1::HotRowsRequest& request,
                                          v1::HotRowsResponse* response) const {
  if (absl::Status s = CheckRequest(request.header()); !s.ok()) return s;
  return parts_.redundancy->HotRows(request, response);
}

absl::Status ParameterServerCore::WriteParity(const v1::WriteParityRequest& request) {
  if (absl::Status s = CheckRequest(request.header()); !s.ok()) return s;
  return parts_.redundancy->WriteParity(request, gate_);
}

absl::Status ParameterServerCore::WriteRows(const v1::WriteRowsRequest& request) {
  if (absl::Status s = CheckRequest(request.header()); !s.ok()) return s;
  const size_t row_bytes = sizeof(float) * parts_.embeddings->payload_floats();
  const std::vector<int64_t> rows(request.rows().begin(), request.rows().end());
  if (request.payloads().size() != row_bytes * rows.size() ||
      request.versions_size() != request.rows_size()) {
    return Refuse(absl::InvalidArgumentError(absl::StrCat(
                      "row write of ", rows.size(), " rows with ", request.payloads().size(),
                      " payload bytes and ", request.versions_size(), " versions: want ",
                      row_bytes, " bytes and one version per row")),
                  request.header(), "a row write");
  }
  if (absl::Status s = parts_.embeddings->Validate(request.table(), rows); !s.ok()) return s;
  const int k = parts_.embeddings->placement().k();
  std::vector<uint64_t> keys;
  for (int64_t row : rows) keys.push_back(UpdateGate::StripeKey(request.table(), row / k));
  // Only under the caller's freeze of the rows' stripes: an update between the caller's read
  // and this write would otherwise be lost (as for a parity write).
  if (!gate_.Holds(request.freeze_id(), request.owner(), keys)) {
    return Refuse(absl::FailedPreconditionError(absl::StrCat(
                      "row write of ", rows.size(), " rows of table ", request.table(), " by '",
                      request.owner(), "' under freeze ", request.freeze_id(),
                      ": the caller holds no live freeze covering their stripes")),
                  request.header(), "a row write");
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    std::vector<float> payload(parts_.embeddings->payload_floats());
    std::memcpy(payload.data(), request.payloads().data() + i * row_bytes, row_bytes);
    if (absl::Status s = parts_.embeddings->RepairRow(request.table(), rows[i], payload.data(),
                                                      request.versions(static_cast<int>(i)));
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status ParameterServerCore::InjectFault(const v1::InjectFaultRequest& request) {
  if (absl::Status s = CheckRequest(request.header(), /*any_epoch=*/true); !s.ok()) return s;
  const char* allowed = std::getenv("ECPS_FAULT_INJECTION");
  if (allowed == nullptr || std::string_view(allowed) != "1") {
    return Refuse(absl::FailedPreconditionError(
                      "fault injection is off on this server (start it with "
                      "ECPS_FAULT_INJECTION=1)"),
                  request.header(), "a fault injection");
  }
  absl::Status s;
  switch (request.target()) {
    case v1::InjectFaultRequest::DATA_ROW:
      s = parts_.embeddings->FlipBit(request.table(), request.index(), request.bit());
      break;
    case v1::InjectFaultRequest::PARITY_ROW:
      s = parts_.redundancy->FlipParityBit(request.table(), request.index(), request.bit());
      break;
    case v1::InjectFaultRequest::DENSE_WEIGHTS:
      s = parts_.dense->FlipBit(request.tensor(), request.bit());
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("fault injection target ", request.target(),
                       ": want DATA_ROW, PARITY_ROW or DENSE_WEIGHTS"));
  }
  if (s.ok()) {
    spdlog::warn("server: fault injected: bit {} of {} (table {} index {} tensor {}) flipped",
                 request.bit(), v1::InjectFaultRequest::Target_Name(request.target()),
                 request.table(), request.index(), request.tensor());
  }
  return s;
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
