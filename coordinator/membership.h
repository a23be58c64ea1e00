// Membership: the coordinator's node table and the cluster map built from it.
//
// The table has S server slots (index = logical server id), W worker slots, and a list of
// spare servers (NODE_STANDBY, id -1) that hold no logical id. Each slot records the
// instance that holds it (a process incarnation), its address, pid, state and latest
// stats. Registration rules:
//   - requested_id in [0, S) (servers) or [0, W) (workers): takes that slot when it is free
//     or its holder was declared DEAD (a replacement: the epoch is bumped; a replacement
//     server starts NODE_RECOVERING, a worker NODE_STARTING); ALREADY_EXISTS when a live
//     instance holds it.
//   - requested_id -1: the lowest never-registered slot; a server finding every slot taken
//     becomes a spare (NODE_STANDBY); a worker gets RESOURCE_EXHAUSTED.
//   - any other id: INVALID_ARGUMENT. The same instance registering again (a retried
//     request) gets its existing assignment back and changes nothing else.
// A dead server's id can also go to a standby spare (PromoteSpare): the spare leaves the spare
// list and holds the id in NODE_RECOVERING, as a replacement process would.
// The epoch starts at 1 and grows only on membership changes (a node declared dead, a
// replacement taking an id). The version grows on every change of map content (states,
// addresses, epoch), so a watcher can tell a new map from one it has.
//
// Not thread-safe: the owner (MembershipManager) serialises calls under its lock.
#ifndef ECPS_COORDINATOR_MEMBERSHIP_H_
#define ECPS_COORDINATOR_MEMBERSHIP_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/ecps.pb.h"
#include "runtime/spec.h"

namespace ecps {
namespace v1 {
class ClusterMap;
class HeartbeatRequest;
class RegisterRequest;
class ServerStats;
class WorkerProgress;
class StatusResponse;
class CoordinatorState;
enum Role : int;
enum NodeState : int;
}  // namespace v1

// Identifies a node of the table.
struct NodeRef {
  v1::Role role;
  int id = -1;  // logical id; -1 for a spare server
  bool spare = false;
  std::string instance;
  std::string address;
  bool worker_done = false;  // a worker that reported done
  int64_t pid = 0;
};

// "server 2", "worker 0", "spare server".
std::string NodeName(const NodeRef& node);
// NodeName with the address and instance, for log lines: "server 2 at h:p (instance i)".
std::string DescribeNode(const NodeRef& node);

class Membership {
 public:
  struct Config {
    int servers = 0;
    int workers = 0;
    FaultToleranceMode mode = FaultToleranceMode::kNone;  // copied into the map by name
    int k = 1;
    int r = 0;
  };

  explicit Membership(Config config);
  ~Membership();
  Membership(const Membership&) = delete;
  Membership& operator=(const Membership&) = delete;

  struct Registration {
    NodeRef node;
    v1::NodeState state;
    bool repeated = false;                // the same instance registered again: nothing changed
    std::optional<std::string> replaced;  // instance of the dead holder this one replaced
    // A worker replacing a dead one: the dead worker's last reported progress (the
    // replacement continues from there; it also stands as the slot's progress until the
    // replacement reports).
    std::optional<v1::WorkerProgress> resume;
  };
  // Applies the registration rules above. On error nothing changes.
  absl::StatusOr<Registration> Register(const v1::RegisterRequest& request);

  struct HeartbeatResult {
    bool fenced = false;       // not the current holder, or declared dead: nothing recorded
    NodeRef node;              // when not fenced
    bool map_changed = false;  // the node's state changed
    bool became_done = false;  // a worker reported done for the first time
    v1::NodeState previous_state = v1::NODE_STATE_UNSPECIFIED;  // before this heartbeat
    v1::NodeState state = v1::NODE_STATE_UNSPECIFIED;           // and after
  };
  // Records a heartbeat's self-reported state and stats for the node that `request.instance`
  // is (looked up among the slots of `request.role`). A node's own report may not claim
  // SUSPECT, DEAD or STANDBY (the coordinator owns those) and UNSPECIFIED keeps the state;
  // a SUSPECT node that heartbeats returns to its reported (or previous) state; a worker
  // whose progress says done becomes NODE_FINISHED. INVALID_ARGUMENT for a bad role or an
  // id out of range (-1 is allowed for servers).
  absl::StatusOr<HeartbeatResult> ApplyHeartbeat(const v1::HeartbeatRequest& request);

  // The node registered at role/id: INVALID_ARGUMENT when the id is out of range,
  // FAILED_PRECONDITION when nobody registered it.
  absl::StatusOr<NodeRef> Holder(v1::Role role, int id) const;
  // The node `instance` is, wherever it sits (also when dead).
  std::optional<NodeRef> Find(const std::string& instance) const;
  std::optional<v1::NodeState> StateOf(const std::string& instance) const;

  // Marks a live node NODE_SUSPECT (remembering its state). Returns whether it changed.
  bool MarkSuspect(const std::string& instance);
  // Declares `instance` dead: NODE_DEAD, epoch + 1. Returns the node, or nullopt when unknown
  // or already dead (nothing changes).
  std::optional<NodeRef> MarkDead(const std::string& instance);

  // Gives dead server `server_id`'s slot to the oldest live standby spare: it holds the id in
  // NODE_RECOVERING, the epoch grows. NOT_FOUND when no live spare is left;
  // FAILED_PRECONDITION when the slot is not held by a dead instance; INVALID_ARGUMENT for an
  // id out of range. On error nothing changes.
  absl::StatusOr<Registration> PromoteSpare(int server_id);

  // The latest stats that the holder of server slot `id` reported (empty when none).
  const v1::ServerStats* ServerStatsOf(int id) const;
  // The online scrub's counts (scrub_* only, runtime/scrub_counters.h) of every server
  // instance whose slot went to a replacement (a restarted process or a promoted spare), as
  // its last heartbeat had them: the slot shows the replacement's own from then on.
  const v1::ServerStats& replaced_servers_scrub() const { return replaced_servers_scrub_; }
  // The latest progress that the holder of worker slot `id` reported (also when dead).
  const v1::WorkerProgress* WorkerProgressOf(int id) const;

  // Some server slot is held by a RECOVERING replacement, or by a dead instance (waiting for
  // its replacement).
  bool AnyServerRecovering() const;
  // Server ids whose slot is held by a dead instance (waiting for a replacement).
  std::vector<int> DeadServerSlots() const;
  int LiveSpares() const;

  bool AllServersActive() const;  // every server slot registered and NODE_ACTIVE
  bool AllWorkersRegistered() const;
  bool AllWorkersDone() const;  // every worker slot registered and done
  // Human-readable list of what the job still waits for: "server 1 (not registered)",
  // "server 0 (STARTING)", "worker 2 (not registered)".
  std::vector<std::string> Waiting() const;
  // Instances of every registered, not-dead node (servers, spares, workers).
  std::vector<std::string> LiveInstances() const;

  uint64_t epoch() const { return epoch_; }
  uint64_t version() const { return version_; }
  int num_servers() const { return config_.servers; }
  int num_workers() const { return config_.workers; }
  const Config& config() const { return config_; }

  // Fills epoch, version, servers (one entry per logical id; a free slot has state
  // UNSPECIFIED), workers, mode, k, r. Leaves phase to the caller. No stats.
  void FillClusterMap(v1::ClusterMap* map) const;
  // Appends one NodeInfo per registered node (servers by id, spares, workers by id) with
  // stats, pid and heartbeat age (from `since_heartbeat`; -1 when it returns nullopt).
  // The table, epoch and version into `state` (servers, spares, workers, epoch, version, the
  // replaced servers' scrub counts).
  void Save(v1::CoordinatorState* state) const;
  // Replaces the table, epoch and version with those Save wrote, and bumps the version (a
  // takeover's map is news to every watcher). INVALID_ARGUMENT when the slot counts differ
  // from this table's (a different spec); nothing changes then.
  absl::Status Restore(const v1::CoordinatorState& state);

  void FillStatusNodes(
      const std::function<std::optional<absl::Duration>(const std::string&)>& since_heartbeat,
      v1::StatusResponse* out) const;

 private:
  struct Node;  // defined in membership.cc (holds proto stats)

  template <typename Self>
  static auto* FindIn(Self& self, v1::Role role, const std::string& instance);
  Node* FindNode(v1::Role role, const std::string& instance);
  const Node* FindNode(v1::Role role, const std::string& instance) const;
  Node* FindNode(const std::string& instance);
  const Node* FindNode(const std::string& instance) const;
  // Register's steps. The slot a new instance takes: `requested`, or the first never
  // registered; nullptr for a server when every slot is taken (it becomes a spare).
  absl::StatusOr<Node*> ChooseSlot(v1::Role role, int requested, const char* role_name,
                                   std::vector<Node>* slots);
  // Files `fresh` as a spare server (STANDBY, no id).
  Registration AddSpare(Node fresh);
  // Puts `fresh` in `slot`, replacing the slot's dead holder if it had one (a new epoch).
  Registration FillSlot(Node* slot, Node fresh);
  // Every change of a registration, a state or a done flag comes with a Bump (the last one
  // explicitly), which also drops the cached phase facts.
  void Bump() {
    ++version_;
    facts_.reset();
  }
  // What AllServersActive, AllWorkersRegistered, AllWorkersDone and AnyServerRecovering say,
  // computed at most once per change: the phase machine asks on every heartbeat, and a scan of
  // 11,000 slots per heartbeat is most of a heartbeat's cost at that size.
  struct PhaseFacts {
    bool all_servers_active = false;
    bool all_workers_registered = false;
    bool all_workers_done = false;
    bool any_server_recovering = false;
  };
  const PhaseFacts& Facts() const;
  // Rebuilds the instance indexes from the tables (after a change that moves nodes around).
  void Reindex();

  const Config config_;
  std::vector<Node> servers_;  // index = logical id
  std::vector<Node> spares_;
  std::vector<Node> workers_;  // index = worker id
  // Every registered instance (also dead ones) and where it sits, by role as FindNode looks:
  // servers' and spares' (spare: an index into spares_, else into servers_), and workers'. A
  // heartbeat finds its node in O(1), not by a scan of 11,000 slots.
  struct ServerSlot {
    bool spare = false;
    int index = 0;
  };
  absl::flat_hash_map<std::string, ServerSlot> server_instances_;
  absl::flat_hash_map<std::string, int> worker_instances_;
  v1::ServerStats replaced_servers_scrub_;  // see replaced_servers_scrub()
  uint64_t epoch_ = 1;
  uint64_t version_ = 1;
  mutable std::optional<PhaseFacts> facts_;  // none: out of date
};

}  // namespace ecps

#endif  // ECPS_COORDINATOR_MEMBERSHIP_H_
