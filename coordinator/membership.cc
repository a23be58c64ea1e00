#include "coordinator/membership.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "proto/coordinator_state.pb.h"
#include "proto/ecps.pb.h"
#include "runtime/scrub_counters.h"
#include "runtime/status_macros.h"

namespace ecps {

struct Membership::Node {
  bool registered = false;
  v1::Role role = v1::ROLE_UNSPECIFIED;
  int id = -1;
  bool spare = false;
  std::string address;
  std::string metrics_address;
  std::string instance;
  int64_t pid = 0;
  v1::NodeState state = v1::NODE_STATE_UNSPECIFIED;
  v1::NodeState before_suspect = v1::NODE_STATE_UNSPECIFIED;
  v1::ServerStats server;
  v1::WorkerProgress worker;

  NodeRef Ref() const {
    return NodeRef{role, id, spare, instance, address, worker.done(), pid};
  }
  bool live() const { return registered && state != v1::NODE_DEAD; }
  // Everything but the heartbeat age.
  void Fill(v1::NodeInfo* info) const {
    info->set_role(role);
    info->set_id(id);
    info->set_address(address);
    info->set_metrics_address(metrics_address);
    info->set_state(state);
    info->set_instance(instance);
    info->set_pid(pid);
    if (role == v1::ROLE_SERVER) {
      *info->mutable_server() = server;
    } else {
      *info->mutable_worker() = worker;
    }
  }
};

std::string NodeName(const NodeRef& node) {
  const char* role = node.role == v1::ROLE_SERVER   ? "server"
                     : node.role == v1::ROLE_WORKER ? "worker"
                                                    : "node";
  if (node.spare) return absl::StrCat("spare ", role);
  return absl::StrCat(role, " ", node.id);
}

std::string DescribeNode(const NodeRef& node) {
  std::string text = NodeName(node);
  if (!node.address.empty()) absl::StrAppend(&text, " at ", node.address);
  absl::StrAppend(&text, " (instance ", node.instance, ")");
  return text;
}

Membership::Membership(Config config) : config_(std::move(config)) {
  servers_.resize(std::max(0, config_.servers));
  for (int i = 0; i < static_cast<int>(servers_.size()); ++i) {
    servers_[i].role = v1::ROLE_SERVER;
    servers_[i].id = i;
  }
  workers_.resize(std::max(0, config_.workers));
  for (int i = 0; i < static_cast<int>(workers_.size()); ++i) {
    workers_[i].role = v1::ROLE_WORKER;
    workers_[i].id = i;
  }
}

Membership::~Membership() = default;

absl::StatusOr<Membership::Node*> Membership::ChooseSlot(v1::Role role, int requested,
                                                         const char* role_name,
                                                         std::vector<Node>* slots) {
  Node* slot = nullptr;
  if (requested >= 0) {
    slot = &(*slots)[requested];
    if (slot->live()) {
      return absl::AlreadyExistsError(absl::StrCat("register: ", role_name, " ", requested,
                                                   " is held by live instance ", slot->instance));
    }
  } else {
    for (Node& candidate : *slots) {
      if (!candidate.registered) {
        slot = &candidate;
        break;
      }
    }
    if (slot == nullptr && role == v1::ROLE_WORKER) {
      return absl::ResourceExhaustedError(
          absl::StrCat("register: all ", slots->size(), " worker slots are taken"));
    }
  }
  return slot;
}

Membership::Registration Membership::AddSpare(Node fresh) {
  Registration result;
  fresh.spare = true;
  fresh.id = -1;
  fresh.state = v1::NODE_STANDBY;
  spares_.push_back(std::move(fresh));
  server_instances_[spares_.back().instance] =
      ServerSlot{/*spare=*/true, static_cast<int>(spares_.size()) - 1};
  Bump();
  result.node = spares_.back().Ref();
  result.state = v1::NODE_STANDBY;
  return result;
}

Membership::Registration Membership::FillSlot(Node* slot, Node fresh) {
  const v1::Role role = fresh.role;
  Registration result;
  fresh.id = slot->id;
  if (slot->registered) {  // replacing a dead holder
    result.replaced = slot->instance;
    if (role == v1::ROLE_SERVER) {
      AddScrubCounts(slot->server, &replaced_servers_scrub_);
      server_instances_.erase(slot->instance);
    } else {
      worker_instances_.erase(slot->instance);
    }
    fresh.state = role == v1::ROLE_SERVER ? v1::NODE_RECOVERING : v1::NODE_STARTING;
    if (role == v1::ROLE_WORKER) {
      // The replacement continues the dead worker's partition; until it reports, the slot's
      // progress is the dead worker's (the job's step does not fall back to 0).
      result.resume = slot->worker;
      fresh.worker = slot->worker;
      fresh.worker.set_done(false);
      fresh.worker.set_samples_per_s(0);
      fresh.worker.clear_error();
    }
    ++epoch_;
  } else {
    fresh.state = v1::NODE_STARTING;
  }
  *slot = std::move(fresh);
  if (role == v1::ROLE_SERVER) {
    server_instances_[slot->instance] = ServerSlot{/*spare=*/false, slot->id};
  } else {
    worker_instances_[slot->instance] = slot->id;
  }
  Bump();
  result.node = slot->Ref();
  result.state = slot->state;
  return result;
}

absl::StatusOr<Membership::Registration> Membership::Register(const v1::RegisterRequest& request) {
  const v1::Role role = request.role();
  if (role != v1::ROLE_SERVER && role != v1::ROLE_WORKER) {
    return absl::InvalidArgumentError("register: role must be ROLE_SERVER or ROLE_WORKER");
  }
  if (request.instance().empty()) {
    return absl::InvalidArgumentError("register: instance must not be empty");
  }
  if (role == v1::ROLE_SERVER && request.address().empty()) {
    return absl::InvalidArgumentError("register: a server must give its address");
  }
  std::vector<Node>& slots = role == v1::ROLE_SERVER ? servers_ : workers_;
  const char* role_name = role == v1::ROLE_SERVER ? "server" : "worker";
  const int requested = request.requested_id();
  if (requested < -1 || requested >= static_cast<int>(slots.size())) {
    return absl::InvalidArgumentError(absl::StrCat("register: ", role_name, " id ", requested,
                                                   " is out of range [0, ", slots.size(),
                                                   ") (or -1 to let the coordinator choose)"));
  }

  // A retried registration of the same instance gets its assignment back.
  if (Node* existing = FindNode(role, request.instance()); existing != nullptr) {
    if (existing->state == v1::NODE_DEAD) {
      return absl::FailedPreconditionError(
          absl::StrCat("register: instance ", request.instance(),
                       " was declared dead; a restarted process needs a new instance"));
    }
    if (requested != -1 && requested != existing->id) {
      return absl::AlreadyExistsError(absl::StrCat("register: instance ", request.instance(),
                                                   " already holds ", NodeName(existing->Ref())));
    }
    return Registration{existing->Ref(), existing->state, /*repeated=*/true, std::nullopt,
                        std::nullopt};
  }

  ASSIGN_OR_RETURN(Node * slot, ChooseSlot(role, requested, role_name, &slots));

  Node fresh;
  fresh.registered = true;
  fresh.role = role;
  fresh.address = request.address();
  fresh.metrics_address = request.metrics_address();
  fresh.instance = request.instance();
  fresh.pid = request.pid();
  if (slot == nullptr) return AddSpare(std::move(fresh));  // a spare server
  return FillSlot(slot, std::move(fresh));
}

absl::StatusOr<Membership::HeartbeatResult> Membership::ApplyHeartbeat(
    const v1::HeartbeatRequest& request) {
  const v1::Role role = request.role();
  if (role != v1::ROLE_SERVER && role != v1::ROLE_WORKER) {
    return absl::InvalidArgumentError("heartbeat: role must be ROLE_SERVER or ROLE_WORKER");
  }
  const int limit = role == v1::ROLE_SERVER ? config_.servers : config_.workers;
  const int lowest = role == v1::ROLE_SERVER ? -1 : 0;
  if (request.id() < lowest || request.id() >= limit) {
    return absl::InvalidArgumentError(
        absl::StrCat("heartbeat: ", role == v1::ROLE_SERVER ? "server" : "worker", " id ",
                     request.id(), " is out of range"));
  }
  HeartbeatResult result;
  Node* node = FindNode(role, request.instance());
  if (node == nullptr || node->state == v1::NODE_DEAD) {
    result.fenced = true;
    return result;
  }

  const v1::NodeState old_state = node->state;
  v1::NodeState reported = request.state();
  if (reported == v1::NODE_SUSPECT || reported == v1::NODE_DEAD || reported == v1::NODE_STANDBY ||
      reported == v1::NODE_STATE_UNSPECIFIED) {
    reported = v1::NODE_STATE_UNSPECIFIED;  // not the node's to claim: keep ours
  }
  v1::NodeState next = old_state == v1::NODE_SUSPECT ? node->before_suspect : old_state;
  if (node->spare) {
    next = v1::NODE_STANDBY;  // a spare stays standby until it is given an id
  } else if (reported != v1::NODE_STATE_UNSPECIFIED) {
    next = reported;
  }
  if (role == v1::ROLE_SERVER) {
    node->server = request.server();
  } else {
    const bool was_done = node->worker.done();
    node->worker = request.worker();
    // done is sticky: a late report cannot undo it.
    if (was_done) node->worker.set_done(true);
    if (node->worker.done()) next = v1::NODE_FINISHED;
    result.became_done = node->worker.done() && !was_done;
    if (result.became_done) facts_.reset();  // when its state was FINISHED already
  }
  if (next != old_state) {
    node->state = next;
    result.map_changed = true;
    Bump();
  }
  result.previous_state = old_state;
  result.state = node->state;
  result.node = node->Ref();
  return result;
}

absl::StatusOr<NodeRef> Membership::Holder(v1::Role role, int id) const {
  if (role != v1::ROLE_SERVER && role != v1::ROLE_WORKER) {
    return absl::InvalidArgumentError("role must be ROLE_SERVER or ROLE_WORKER");
  }
  const std::vector<Node>& slots = role == v1::ROLE_SERVER ? servers_ : workers_;
  const char* role_name = role == v1::ROLE_SERVER ? "server" : "worker";
  if (id < 0 || id >= static_cast<int>(slots.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat(role_name, " id ", id, " is out of range [0, ", slots.size(), ")"));
  }
  if (!slots[id].registered) {
    return absl::FailedPreconditionError(absl::StrCat(role_name, " ", id, " is not registered"));
  }
  return slots[id].Ref();
}

std::optional<NodeRef> Membership::Find(const std::string& instance) const {
  const Node* node = FindNode(instance);
  if (node == nullptr) return std::nullopt;
  return node->Ref();
}

std::optional<v1::NodeState> Membership::StateOf(const std::string& instance) const {
  const Node* node = FindNode(instance);
  if (node == nullptr) return std::nullopt;
  return node->state;
}

bool Membership::MarkSuspect(const std::string& instance) {
  Node* node = FindNode(instance);
  if (node == nullptr || !node->live() || node->state == v1::NODE_SUSPECT) return false;
  node->before_suspect = node->state;
  node->state = v1::NODE_SUSPECT;
  Bump();
  return true;
}

std::optional<NodeRef> Membership::MarkDead(const std::string& instance) {
  Node* node = FindNode(instance);
  if (node == nullptr || !node->live()) return std::nullopt;
  node->state = v1::NODE_DEAD;
  ++epoch_;
  Bump();
  return node->Ref();
}

absl::StatusOr<Membership::Registration> Membership::PromoteSpare(int server_id) {
  if (server_id < 0 || server_id >= static_cast<int>(servers_.size())) {
    return absl::InvalidArgumentError(absl::StrCat("server id ", server_id,
                                                   " is out of range [0, ", servers_.size(), ")"));
  }
  Node& slot = servers_[server_id];
  if (!slot.registered || slot.state != v1::NODE_DEAD) {
    return absl::FailedPreconditionError(
        absl::StrCat("server ", server_id, " is not held by a dead instance"));
  }
  auto spare = std::find_if(spares_.begin(), spares_.end(), [](const Node& n) {
    return n.live() && n.state == v1::NODE_STANDBY;
  });
  if (spare == spares_.end()) {
    return absl::NotFoundError(absl::StrCat("no standby spare left for server ", server_id));
  }
  Registration result;
  result.replaced = slot.instance;
  Node promoted = std::move(*spare);
  spares_.erase(spare);
  promoted.spare = false;
  promoted.id = server_id;
  promoted.state = v1::NODE_RECOVERING;
  promoted.before_suspect = v1::NODE_STATE_UNSPECIFIED;
  promoted.server = v1::ServerStats();
  AddScrubCounts(slot.server, &replaced_servers_scrub_);
  slot = std::move(promoted);
  Reindex();  // the spares after the promoted one moved down
  ++epoch_;
  Bump();
  result.node = slot.Ref();
  result.state = slot.state;
  return result;
}

const v1::ServerStats* Membership::ServerStatsOf(int id) const {
  if (id < 0 || id >= static_cast<int>(servers_.size())) return nullptr;
  return &servers_[id].server;
}

const v1::WorkerProgress* Membership::WorkerProgressOf(int id) const {
  if (id < 0 || id >= static_cast<int>(workers_.size())) return nullptr;
  return &workers_[id].worker;
}

bool Membership::AnyServerRecovering() const { return Facts().any_server_recovering; }

std::vector<int> Membership::DeadServerSlots() const {
  std::vector<int> dead;
  for (const Node& node : servers_) {
    if (node.registered && node.state == v1::NODE_DEAD) dead.push_back(node.id);
  }
  return dead;
}

int Membership::LiveSpares() const {
  int n = 0;
  for (const Node& node : spares_) n += node.live() && node.state == v1::NODE_STANDBY;
  return n;
}

bool Membership::AllServersActive() const { return Facts().all_servers_active; }

bool Membership::AllWorkersRegistered() const { return Facts().all_workers_registered; }

bool Membership::AllWorkersDone() const { return Facts().all_workers_done; }

const Membership::PhaseFacts& Membership::Facts() const {
  if (facts_) return *facts_;
  PhaseFacts f;
  f.all_servers_active = true;
  for (const Node& node : servers_) {
    if (!node.registered || node.state != v1::NODE_ACTIVE) f.all_servers_active = false;
    if (!node.registered) continue;
    if (node.state == v1::NODE_RECOVERING || node.state == v1::NODE_DEAD ||
        (node.state == v1::NODE_SUSPECT && node.before_suspect == v1::NODE_RECOVERING)) {
      f.any_server_recovering = true;
    }
  }
  f.all_workers_registered = true;
  f.all_workers_done = true;
  for (const Node& node : workers_) {
    if (!node.registered) f.all_workers_registered = false;
    if (!node.registered || !node.worker.done()) f.all_workers_done = false;
  }
  facts_ = f;
  return *facts_;
}

std::vector<std::string> Membership::Waiting() const {
  std::vector<std::string> waiting;
  for (const Node& node : servers_) {
    if (!node.registered) {
      waiting.push_back(absl::StrCat("server ", node.id, " (not registered)"));
    } else if (node.state != v1::NODE_ACTIVE) {
      waiting.push_back(
          absl::StrCat("server ", node.id, " (", v1::NodeState_Name(node.state), ")"));
    }
  }
  for (const Node& node : workers_) {
    if (!node.registered) waiting.push_back(absl::StrCat("worker ", node.id, " (not registered)"));
  }
  return waiting;
}

std::vector<std::string> Membership::LiveInstances() const {
  std::vector<std::string> live;
  for (const auto* table : {&servers_, &spares_, &workers_}) {
    for (const Node& node : *table) {
      if (node.live()) live.push_back(node.instance);
    }
  }
  return live;
}

void Membership::FillClusterMap(v1::ClusterMap* map) const {
  map->set_epoch(epoch_);
  map->set_version(version_);
  map->set_mode(ToString(config_.mode));
  map->set_k(config_.k);
  map->set_r(config_.r);
  map->clear_servers();
  map->clear_workers();
  auto fill = [](const Node& node, v1::NodeInfo* info) {
    info->set_role(node.role);
    info->set_id(node.id);
    if (!node.registered) return;
    info->set_address(node.address);
    info->set_state(node.state);
    info->set_instance(node.instance);
    info->set_pid(node.pid);
  };
  for (const Node& node : servers_) fill(node, map->add_servers());
  for (const Node& node : workers_) fill(node, map->add_workers());
}

void Membership::FillStatusNodes(
    const std::function<std::optional<absl::Duration>(const std::string&)>& since_heartbeat,
    v1::StatusResponse* out) const {
  for (const auto* table : {&servers_, &spares_, &workers_}) {
    for (const Node& node : *table) {
      if (!node.registered) continue;
      v1::NodeInfo* info = out->add_nodes();
      node.Fill(info);
      std::optional<absl::Duration> age = since_heartbeat(node.instance);
      info->set_heartbeat_age_ms(age ? absl::ToInt64Milliseconds(*age) : -1);
    }
  }
}

void Membership::Save(v1::CoordinatorState* state) const {
  state->set_epoch(epoch_);
  state->set_version(version_);
  auto save = [](const std::vector<Node>& table,
                 google::protobuf::RepeatedPtrField<v1::StoredNode>* out) {
    for (const Node& node : table) {
      v1::StoredNode* stored = out->Add();
      node.Fill(stored->mutable_info());
      stored->set_registered(node.registered);
      stored->set_before_suspect(node.before_suspect);
    }
  };
  save(servers_, state->mutable_servers());
  save(spares_, state->mutable_spares());
  save(workers_, state->mutable_workers());
  *state->mutable_replaced_servers_scrub() = replaced_servers_scrub_;
}

absl::Status Membership::Restore(const v1::CoordinatorState& state) {
  if (state.servers_size() != config_.servers || state.workers_size() != config_.workers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the saved state has ", state.servers_size(), " servers and ", state.workers_size(),
        " workers; the spec has ", config_.servers, " and ", config_.workers));
  }
  auto restore = [](const google::protobuf::RepeatedPtrField<v1::StoredNode>& in,
                    std::vector<Node>* table) {
    table->clear();
    for (const v1::StoredNode& stored : in) {
      const v1::NodeInfo& info = stored.info();
      Node node;
      node.registered = stored.registered();
      node.role = info.role();
      node.id = info.id();
      node.spare = info.role() == v1::ROLE_SERVER && info.id() < 0;
      node.address = info.address();
      node.metrics_address = info.metrics_address();
      node.instance = info.instance();
      node.pid = info.pid();
      node.state = info.state();
      node.before_suspect = stored.before_suspect();
      node.server = info.server();
      node.worker = info.worker();
      table->push_back(std::move(node));
    }
  };
  restore(state.servers(), &servers_);
  restore(state.spares(), &spares_);
  restore(state.workers(), &workers_);
  replaced_servers_scrub_ = state.replaced_servers_scrub();
  Reindex();
  epoch_ = state.epoch();
  version_ = state.version();
  Bump();
  return absl::OkStatus();
}

void Membership::Reindex() {
  server_instances_.clear();
  worker_instances_.clear();
  for (int i = 0; i < static_cast<int>(servers_.size()); ++i) {
    if (servers_[i].registered) server_instances_[servers_[i].instance] = ServerSlot{false, i};
  }
  for (int i = 0; i < static_cast<int>(spares_.size()); ++i) {
    server_instances_[spares_[i].instance] = ServerSlot{true, i};
  }
  for (int i = 0; i < static_cast<int>(workers_.size()); ++i) {
    if (workers_[i].registered) worker_instances_[workers_[i].instance] = i;
  }
}

template <typename Self>
auto* Membership::FindIn(Self& self, v1::Role role, const std::string& instance) {
  decltype(&self.servers_[0]) none = nullptr;
  if (role == v1::ROLE_SERVER) {
    auto it = self.server_instances_.find(instance);
    if (it == self.server_instances_.end()) return none;
    auto& table = it->second.spare ? self.spares_ : self.servers_;
    return &table[static_cast<size_t>(it->second.index)];
  }
  if (role == v1::ROLE_WORKER) {
    auto it = self.worker_instances_.find(instance);
    if (it != self.worker_instances_.end()) return &self.workers_[static_cast<size_t>(it->second)];
  }
  return none;
}

Membership::Node* Membership::FindNode(v1::Role role, const std::string& instance) {
  return FindIn(*this, role, instance);
}

const Membership::Node* Membership::FindNode(v1::Role role, const std::string& instance) const {
  return FindIn(*this, role, instance);
}

Membership::Node* Membership::FindNode(const std::string& instance) {
  if (Node* node = FindNode(v1::ROLE_SERVER, instance)) return node;
  return FindNode(v1::ROLE_WORKER, instance);
}

const Membership::Node* Membership::FindNode(const std::string& instance) const {
  if (const Node* node = FindNode(v1::ROLE_SERVER, instance)) return node;
  return FindNode(v1::ROLE_WORKER, instance);
}

}  // namespace ecps
