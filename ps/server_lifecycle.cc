#include "ps/server_lifecycle.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "runtime/rpc.h"
#include "spdlog/spdlog.h"

namespace ecps {

v1::NodeState InitialServerState(v1::NodeState registered) {
  if (registered == v1::NODE_STANDBY || registered == v1::NODE_RECOVERING) return registered;
  return v1::NODE_STARTING;
}

int ServerSlotOf(const v1::ClusterMap& map, const std::string& instance) {
  for (int s = 0; s < map.servers_size(); ++s) {
    if (map.servers(s).instance() == instance) return s;
  }
  return -1;
}

bool EveryServerAddressed(const v1::ClusterMap& map, int servers) {
  if (map.servers_size() != servers) return false;
  for (const auto& s : map.servers()) {
    if (s.address().empty()) return false;
  }
  return true;
}

std::set<int> UnusableServers(const v1::ClusterMap& map, int self) {
  std::set<int> out;
  for (int s = 0; s < map.servers_size(); ++s) {
    const v1::NodeState st = map.servers(s).state();
    if (s != self && st != v1::NODE_ACTIVE && st != v1::NODE_SUSPECT) out.insert(s);
  }
  return out;
}

std::vector<int> LivePeers(const v1::ClusterMap& map, int self) {
  std::vector<int> out;
  for (int s = 0; s < map.servers_size(); ++s) {
    const v1::NodeState st = map.servers(s).state();
    if (s != self &&
        (st == v1::NODE_ACTIVE || st == v1::NODE_RECOVERING || st == v1::NODE_SUSPECT)) {
      out.push_back(s);
    }
  }
  return out;
}

bool TrainingDone(const v1::ClusterMap& map) {
  if (map.workers_size() == 0) return false;
  for (const v1::NodeInfo& w : map.workers()) {
    if (w.state() != v1::NODE_FINISHED) return false;
  }
  return true;
}

MapStanding StandingInMap(const v1::ClusterMap& map, int id, const std::string& instance) {
  if (id < 0 || id >= map.servers_size()) return MapStanding::kHeld;
  const v1::NodeInfo& slot = map.servers(id);
  if (!slot.instance().empty() && slot.instance() != instance) return MapStanding::kReplaced;
  if (slot.instance() == instance && slot.state() == v1::NODE_DEAD) {
    return MapStanding::kDeclaredDead;
  }
  return MapStanding::kHeld;
}

std::vector<std::pair<int, std::string>> PeerAddressBook::Update(const v1::ClusterMap& map) {
  std::vector<std::pair<int, std::string>> changed;
  known_.resize(map.servers_size());
  for (int s = 0; s < map.servers_size(); ++s) {
    const std::string& address = map.servers(s).address();
    if (address.empty() || address == known_[s]) continue;
    if (!known_[s].empty()) changed.emplace_back(s, address);
    known_[s] = address;
  }
  return changed;
}

ServerLifecycle::ServerLifecycle(const ServerOptions& options, std::string instance,
                                 std::string address, CoordinatorLink* coordinator,
                                 ParameterServerCore* core, const std::atomic<bool>* stop)
    : options_(options),
      instance_(std::move(instance)),
      address_(std::move(address)),
      coordinator_(coordinator),
      core_(core),
      stop_(stop),
      id_(options.requested_id),
      grace_(std::chrono::milliseconds(options.spec.cluster.heartbeat_interval_ms),
             std::chrono::seconds(options.spec.cluster.coordinator_grace_s),
             std::chrono::steady_clock::now()) {}

void ServerLifecycle::SetExitCodeIfUnset(int code) {
  int unset = -1;
  exit_code_.compare_exchange_strong(unset, code);
}

absl::StatusOr<v1::RegisterResponse> ServerLifecycle::Register() {
  const ClusterSection& cluster = options_.spec.cluster;
  auto registered = coordinator_->Register(v1::ROLE_SERVER, address_, options_.requested_id,
                                           instance_, cluster.connect_timeout_s * 1000);
  if (!registered.ok()) {
    return absl::Status(registered.status().code(),
                        absl::StrCat("cannot register with the coordinator at ",
                                     options_.coordinator, ": ", registered.status().message()));
  }
  id_.store(registered->id());
  state_.store(InitialServerState(registered->state()));
  return registered;
}

HeartbeatAction ServerLifecycle::Heartbeat(std::chrono::steady_clock::time_point now) {
  v1::HeartbeatRequest hb;
  FillHeader(hb.mutable_header(), core_->token(), coordinator_->epoch(), sender());
  hb.set_role(v1::ROLE_SERVER);
  hb.set_id(id_.load());
  hb.set_instance(instance_);
  v1::NodeState state = state_.load();
  if (state == v1::NODE_RECOVERING && core_->ready() && core_->rebuilt()) {
    state_.store(v1::NODE_ACTIVE);
    state = v1::NODE_ACTIVE;
    spdlog::info("server {}: rebuilt; active", id_.load());
  }
  hb.set_state(state);
  core_->FillStats(hb.mutable_server());
  auto resp = coordinator_->Heartbeat(hb);
  if (!resp.ok()) {
    // Training goes on with the map this server holds; the coordinator may come back.
    grace_.Failed(now);
    if (grace_.failures() == 1) {
      spdlog::warn("server {}: the coordinator does not answer ({}); training goes on, "
                   "retrying with backoff for up to {} s",
                   id_.load(), resp.status().ToString(), grace_.grace().count());
    }
    if (!grace_.Lost(now)) return HeartbeatAction::kContinue;
    lost_message_ = absl::StrCat("server ", id_.load(), ": ",
                                 grace_.LostMessage(options_.coordinator, now));
    SetExitCodeIfUnset(1);
    return HeartbeatAction::kCoordinatorLost;
  }
  if (grace_.failures() > 0) {
    spdlog::info("server {}: the coordinator answers again after {} ms", id_.load(),
                 grace_.Silent(now).count());
  }
  grace_.Answered(now);
  core_->ObserveCoordinatorTerm(resp->term());
  if (resp->fenced()) {
    // Declared dead (a pause past the timeout, a partition): refuse everything at once and
    // never adopt the new epoch, so nothing this process still sends is accepted.
    core_->Fence();
    fenced_epoch_.store(resp->epoch());
  } else if (resp->epoch() > core_->epoch()) {
    core_->SetEpoch(resp->epoch());
  }
  if (resp->kill()) return HeartbeatAction::kKill;
  if (resp->fenced()) return HeartbeatAction::kFenced;
  if (resp->phase() == v1::JOB_FINISHED) {
    exit_code_.store(0);
  } else if (resp->phase() == v1::JOB_FAILED) {
    exit_code_.store(1);
  }
  return HeartbeatAction::kContinue;
}

bool ServerLifecycle::WaitForSlot() {
  while (running()) {
    auto map = coordinator_->WaitForMap(
        [this](const v1::ClusterMap& m) { return ServerSlotOf(m, instance_) >= 0; }, 200);
    if (map.ok()) {
      id_.store(ServerSlotOf(*map, instance_));
      state_.store(v1::NODE_RECOVERING);
      spdlog::info("server {}: promoted from spare (epoch {}); rebuilding", id_.load(),
                   map->epoch());
      return true;
    }
  }
  return false;
}

RecoveryHooks ServerLifecycle::MakeRecoveryHooks(int self) const {
  CoordinatorLink* coordinator = coordinator_;
  RecoveryHooks hooks;
  hooks.unusable = [coordinator, self] { return UnusableServers(coordinator->map(), self); };
  hooks.live_peers = [coordinator, self] { return LivePeers(coordinator->map(), self); };
  hooks.training_done = [coordinator] { return TrainingDone(coordinator->map()); };
  return hooks;
}

absl::Status ServerLifecycle::Start() {
  const JobSpec& spec = options_.spec;
  const bool recovering = state_.load() == v1::NODE_RECOVERING;
  // Peers' addresses are needed for parity streams and dense replicas: wait until every
  // server slot has one, as long as the coordinator waits for them (roles start in any
  // order).
  const int servers = spec.cluster.servers;
  auto map = coordinator_->WaitForMap(
      [servers](const v1::ClusterMap& m) { return EveryServerAddressed(m, servers); },
      spec.cluster.connect_timeout_s * 1000);
  if (!map.ok()) {
    exit_code_.store(1);
    return map.status();
  }
  std::vector<std::string> addresses;
  for (const auto& s : map->servers()) addresses.push_back(s.address());
  const int self = id_.load();
  const RecoveryHooks hooks = MakeRecoveryHooks(self);
  if (map->epoch() > core_->epoch()) core_->SetEpoch(map->epoch());
  const auto t0 = std::chrono::steady_clock::now();
  // Mode checkpoint has nothing to rebuild from: a replacement loads the last checkpoint (the
  // coordinator then has every server reload it and every worker rewind).
  const bool from_checkpoint =
      recovering && spec.fault_tolerance.mode == FaultToleranceMode::kCheckpoint;
  JobSpec build_spec = spec;
  if (from_checkpoint) build_spec.job.resume_from = spec.fault_tolerance.checkpoint.dir;
  CoordinatorLink* coordinator = coordinator_;
  auto parts = BuildServerParts(build_spec, self, addresses, core_, instance_, nullptr,
                                recovering && !from_checkpoint ? &hooks : nullptr,
                                [coordinator](int peer, const std::string& address) {
                                  coordinator->ReportServerUnreachable(
                                      peer, "RPCs from a peer server fail", address);
                                });
  if (!parts.ok()) {
    // A server that cannot hold its tables will not on a restart either: say so with an
    // exit code of its own, so that the launcher does not start it again.
    exit_code_.store(absl::IsResourceExhausted(parts.status()) ? kExitCannotAllocate : 1);
    return parts.status();
  }
  const int64_t rows = parts->embeddings->data_rows();
  const int64_t parity = parts->redundancy->parity_rows();
  const std::string code = parts->redundancy->backend();
  core_->Install(std::move(*parts));
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (recovering) {
    core_->StartRebuild();
    spdlog::info("server {}: replacement serving; rebuilding {} data rows and {} parity rows "
                 "({}) from the survivors", self, rows, parity, code);
  } else {
    state_.store(v1::NODE_ACTIVE);
    spdlog::info("server {}: {} data rows and {} parity rows ({}) initialised in {:.2f} s; "
                 "serving", self, rows, parity, code, secs);
  }
  return absl::OkStatus();
}

bool ServerLifecycle::FollowMap() {
  const v1::ClusterMap map = coordinator_->map();
  switch (StandingInMap(map, id_.load(), instance_)) {
    case MapStanding::kReplaced:
      // The map gives this id to another instance: this process was replaced.
      core_->Fence();
      return false;
    case MapStanding::kDeclaredDead:
      // Declared dead, not replaced yet: out for good all the same. Without this, the map
      // stream (which may get through before the next heartbeat does) would hand this
      // process the new epoch, and requests it sends would carry a current one.
      core_->Fence();
      return false;
    case MapStanding::kHeld:
      break;
  }
  core_->ObserveCoordinatorTerm(map.term());
  if (map.epoch() > core_->epoch()) core_->SetEpoch(map.epoch());
  if (core_->ready()) core_->FollowMap(map);
  for (const auto& [server, address] : peers_.Update(map)) {
    core_->UpdatePeerAddress(server, address);
  }
  return true;
}

}  // namespace ecps
