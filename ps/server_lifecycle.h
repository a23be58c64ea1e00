// The steps of a parameter server process's life, apart from the process itself (signals,
// the gRPC server, exiting), so that each can be driven by a unit test against a fake
// coordinator: register, heartbeat, wait for a slot (a spare), wait for every peer's
// address, build and install the tables, follow the cluster map, and the fencing decisions
// between them. ps/server_main.cc's RunServer strings them together.
//
// The pure functions below decide from a cluster map or a heartbeat response alone;
// ServerLifecycle holds what the steps share (this process's id and state, the exit code the
// coordinator decided) and applies the decisions to a ParameterServerCore.
#ifndef ECPS_PS_SERVER_LIFECYCLE_H_
#define ECPS_PS_SERVER_LIFECYCLE_H_

#include <atomic>
#include <chrono>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/ecps.pb.h"
#include "runtime/coordinator_grace.h"
#include "ps/parameter_server.h"
#include "ps/server_main.h"
#include "ps/server_parts.h"
#include "runtime/coordinator_link.h"

namespace ecps {

// The state a server starts in from what its registration said: a standby spare, a
// replacement (it rebuilds a dead server's rows), or a member starting with the job.
v1::NodeState InitialServerState(v1::NodeState registered);

// The logical id `instance` holds in `map`, or -1.
int ServerSlotOf(const v1::ClusterMap& map, const std::string& instance);

// Whether `map` has `servers` server slots and every one has an address (what a server
// needs before it can open parity streams and dense replicas to its peers).
bool EveryServerAddressed(const v1::ClusterMap& map, int servers);

// For a replacement's rebuild, from `map`: the servers other than `self` whose rows cannot
// be read (neither ACTIVE nor SUSPECT: a suspect is probably alive, and what fails to read
// from it counts as missing), ...
std::set<int> UnusableServers(const v1::ClusterMap& map, int self);
// ... the peers other than `self` that are alive (ACTIVE, RECOVERING or SUSPECT), ...
std::vector<int> LivePeers(const v1::ClusterMap& map, int self);
// ... and whether there are workers and all of them have finished.
bool TrainingDone(const v1::ClusterMap& map);

// Where the map puts the instance that holds server `id`.
enum class MapStanding {
  kHeld,          // the slot is this instance's (or not filled in yet)
  kReplaced,      // another instance holds the slot: this process was replaced
  kDeclaredDead,  // the slot is still this instance's, marked DEAD
};
MapStanding StandingInMap(const v1::ClusterMap& map, int id, const std::string& instance);

// Remembers every server's address and tells which changed since the last map: a replaced
// peer has a new address that its clients must dial. Not thread-safe.
class PeerAddressBook {
 public:
  // The (server, new address) pairs of `map` whose address differs from the one known
  // before; a slot's first address is learnt, not reported (its clients dial it already).
  std::vector<std::pair<int, std::string>> Update(const v1::ClusterMap& map);

 private:
  std::vector<std::string> known_;
};

// What the process must do after a heartbeat.
enum class HeartbeatAction {
  kContinue,
  kKill,    // `ecps kill`: die at once, as a crash would (SIGKILL)
  kFenced,  // declared dead: the core is fenced; leave at once
  // No answer from the coordinator for cluster.coordinator_grace_s: exit_code() is set (1)
  // and the process stops, saying why (lost_message()).
  kCoordinatorLost,
};

class ServerLifecycle {
 public:
  // `coordinator`, `core` and `stop` (raised on SIGTERM/SIGINT) must outlive this object.
  // `instance` is this process's incarnation, `address` what peers and workers dial.
  ServerLifecycle(const ServerOptions& options, std::string instance, std::string address,
                  CoordinatorLink* coordinator, ParameterServerCore* core,
                  const std::atomic<bool>* stop);

  // Registers as options.requested_id (or as a spare, with -1), waiting up to
  // cluster.connect_timeout_s for the coordinator; sets id() and state(). The error names
  // the coordinator.
  absl::StatusOr<v1::RegisterResponse> Register();

  // One heartbeat with this server's state and stats. A RECOVERING server whose rebuild is
  // complete reports ACTIVE from now on. Applies the response: a fenced server fences its
  // core (and never adopts the new epoch), otherwise a newer epoch is adopted; a finished or
  // failed job sets exit_code(). Returns what the process must do at once. A heartbeat that
  // fails changes nothing (the next one retries, after NextHeartbeatWait()) until nothing was
  // heard for the grace (runtime/coordinator_grace.h). `now` is for tests.
  HeartbeatAction Heartbeat(
      std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now());
  // How long the heartbeat thread waits before the next heartbeat: the interval, or a backoff
  // after failures.
  std::chrono::milliseconds NextHeartbeatWait() const { return grace_.NextWait(); }
  // Why the process stopped after kCoordinatorLost.
  const std::string& lost_message() const { return lost_message_; }

  // A standby spare: waits until the map gives this instance an id, then takes it and
  // turns RECOVERING. Returns false when stopped or the job ended first.
  bool WaitForSlot();

  // Waits (up to cluster.connect_timeout_s) until every server slot has an address, builds
  // this server's tables (a replacement's rows start lost and rebuild from the survivors;
  // in mode checkpoint it loads the last checkpoint instead) and installs them in the core.
  // A replacement starts rebuilding; any other server turns ACTIVE. On an error sets
  // exit_code() (kExitCannotAllocate when the tables do not fit, else 1) and returns it.
  absl::Status Start();

  // One look at the latest map: fences the core and returns false when the map says this
  // process was replaced or declared dead; otherwise adopts a newer epoch, hands the map to
  // the core (once it is ready) and a replaced peer's new address to it, and returns true.
  bool FollowMap();

  // Whether the process should carry on: not stopped and no exit code decided.
  bool running() const { return !stop_->load() && exit_code_.load() < 0; }
  int id() const { return id_.load(); }
  v1::NodeState state() const { return state_.load(); }
  // -1 while undecided.
  int exit_code() const { return exit_code_.load(); }
  // The epoch of the heartbeat response that fenced this server (0 before one did).
  uint64_t fenced_epoch() const { return fenced_epoch_.load(); }
  // Decides the exit code unless one was decided already.
  void SetExitCodeIfUnset(int code);

 private:
  std::string sender() const { return "server-" + std::to_string(id_.load()); }
  RecoveryHooks MakeRecoveryHooks(int self) const;

  const ServerOptions& options_;
  const std::string instance_;
  const std::string address_;
  CoordinatorLink* const coordinator_;
  ParameterServerCore* const core_;
  const std::atomic<bool>* const stop_;
  std::atomic<int> id_;
  std::atomic<v1::NodeState> state_{v1::NODE_STARTING};
  std::atomic<int> exit_code_{-1};
  std::atomic<uint64_t> fenced_epoch_{0};
  PeerAddressBook peers_;  // FollowMap's thread only
  CoordinatorGrace grace_;    // the heartbeat thread only
  std::string lost_message_;  // the heartbeat thread only
};

}  // namespace ecps

#endif  // ECPS_PS_SERVER_LIFECYCLE_H_
