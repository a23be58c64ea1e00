// MembershipManager: the node table, the job phase and the cluster map that carries both,
// behind the coordinator's first lock.
//
// It owns Membership (registrations, heartbeats, epochs, spares), the job phase with its
// error, the coordinator's term, the map shared with every WatchClusterMap stream, and the
// saving of the coordinator's state: every change of the map is saved (whole, with the other
// managers' parts) under its lock before it can be seen, so that a takeover never restores an
// epoch or phase older than one a node was told.
//
// Lock order (the coordinator's, also in coordinator_service.h):
//   CheckpointManager's ops lock -> MembershipManager::mu_ -> one leaf lock at a time
//   (FailureManager, ProgressManager, CheckpointManager, ScrubManager).
// This is the one manager that calls others while holding its lock: the failure and progress
// managers on registrations, heartbeats and deaths, and, through Hooks, the checkpoint and
// scrub managers for the phase's facts and their parts of a saved state. The leaves never
// call back. The checkpoint and scrub managers call this one only while holding none of
// their leaf locks.
#ifndef ECPS_COORDINATOR_MEMBERSHIP_MANAGER_H_
#define ECPS_COORDINATOR_MEMBERSHIP_MANAGER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "runtime/clock.h"
#include "coordinator/failure_manager.h"
#include "coordinator/membership.h"
#include "coordinator/progress_manager.h"
#include "coordinator/rollback_controller.h"
#include "proto/ecps.pb.h"

namespace ecps {
namespace v1 {
class CoordinatorState;
}  // namespace v1

// After a takeover, how much longer than the heartbeat timeout a live node has to heartbeat
// again: its heartbeats back off up to 2 s while the coordinator is away
// (runtime/coordinator_grace.h), and its channel's reconnects up to 1 s (runtime/rpc.cc).
inline constexpr absl::Duration kTakeoverGrace = absl::Seconds(3);

// What the checkpoint and scrub operations need to know of the job before they start.
struct JobView {
  v1::JobPhase phase = v1::JOB_STARTING;
  bool final = false;  // FINISHED or FAILED
  bool all_servers_active = false;
  bool any_server_recovering = false;
  bool all_workers_done = false;
};

class MembershipManager {
 public:
  struct Options {
    std::string job_name;
    // The job fails when not every server is ACTIVE and every worker registered by then.
    absl::Duration startup_timeout = absl::Seconds(120);
    // How often a blocked WatchClusterMap wakes up to notice a cancelled client.
    absl::Duration watch_wakeup = absl::Milliseconds(200);
  };
  // Called under this manager's lock (each takes only its own, a leaf's): the other
  // managers' parts of the saved state and of the phase machine's facts. Set once.
  struct Hooks {
    std::function<void(v1::CoordinatorState*)> save_parts;
    std::function<bool()> final_checkpoint_wanted;
    std::function<bool()> final_scrub_wanted;
    std::function<void()> request_final_checkpoint;  // RunPendingCheckpoint saves it
    std::function<void()> request_final_scrub;       // RunPendingScrub finishes the job
  };
  using StateSaver = std::function<absl::Status(const v1::CoordinatorState&)>;
  // A server declared dead, for the ServerDeadHandler (`why`: the log line's text).
  struct DeadServer {
    int id;
    std::string why;
  };

  // `clock`, `failures` and `progress` must outlive the manager.
  MembershipManager(const Clock* clock, Membership::Config config, Options options,
                    FailureManager* failures, ProgressManager* progress, Hooks hooks);
  MembershipManager(const MembershipManager&) = delete;
  MembershipManager& operator=(const MembershipManager&) = delete;

  // The RPCs of coordinator_service.h, after authentication (same contracts). Heartbeat
  // leaves the rollback's fields to the checkpoint manager.
  absl::Status Register(const v1::RegisterRequest& request, v1::RegisterResponse* response)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Heartbeat(const v1::HeartbeatRequest& request, v1::HeartbeatResponse* response)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Kill(const v1::KillRequest& request, v1::KillResponse* response)
      ABSL_LOCKS_EXCLUDED(mu_);
  bool ReplaceServer(int server_id) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status WatchClusterMap(const v1::WatchClusterMapRequest& request,
                               const std::function<bool()>& cancelled,
                               const std::function<bool(const v1::ClusterMap&)>& send)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);
  // Job, metrics address, phase, epoch, mode, k, r, error, data_lost and the nodes (with
  // their heartbeat ages) into a Status response.
  void FillStatus(v1::StatusResponse* response) const ABSL_LOCKS_EXCLUDED(mu_);
  void set_metrics_address(std::string address) ABSL_LOCKS_EXCLUDED(mu_);

  // --- Failure handling (the service hands the dead servers to the ServerDeadHandler) ---
  struct Report {
    std::vector<DeadServer> dead;
    std::optional<NodeRef> probe;  // a suspected server whose process may be gone
  };
  // A peer's failure report (CoordinatorService::ReportFailure's contract).
  absl::StatusOr<Report> ReportFailure(const v1::ReportFailureRequest& request)
      ABSL_LOCKS_EXCLUDED(mu_);
  struct TickResult {
    std::vector<DeadServer> dead;
    std::vector<NodeRef> suspected;  // servers to probe (only when the failures manager probes)
  };
  // Failure detection and the startup timeout at the clock's current time.
  TickResult Tick() ABSL_LOCKS_EXCLUDED(mu_);
  // `node`'s process is gone: declares it dead when it is still suspected.
  std::vector<DeadServer> DeclareGone(const NodeRef& node) ABSL_LOCKS_EXCLUDED(mu_);
  // True when no dead server should be handed over: the job ended, or (failed here, with
  // data_lost) more than r members of some stripes are gone.
  bool EndedOrDataLost() ABSL_LOCKS_EXCLUDED(mu_);
  // The coordinator could hear nobody for `duration`: FailureManager::Deaf.
  void Stalled(absl::Duration duration) ABSL_LOCKS_EXCLUDED(mu_);

  // --- The phase, for the other managers' operations ---
  // With `map`: the current map too, of the same moment.
  JobView View(v1::ClusterMap* map = nullptr) const ABSL_LOCKS_EXCLUDED(mu_);
  // Re-evaluates the phase (after a final checkpoint or scrub, a replacement) and publishes.
  void Advance() ABSL_LOCKS_EXCLUDED(mu_);
  // Fails the job (unless it already ended) and publishes.
  void Fail(const std::string& error) ABSL_LOCKS_EXCLUDED(mu_);
  // Saves the state now (with a saver): after a change outside the map, before it is told.
  void SaveChange() ABSL_LOCKS_EXCLUDED(mu_);
  // Calls `read` under this manager's lock with each worker's latest report (no copies: with
  // 11,000 workers a copy per call would cost). `read` may take one leaf lock.
  void ReadWorkers(const std::function<void(const WorkerReports&)>& read) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Another manager's change that nodes hear of (a rollback's step in heartbeat responses) or
  // that a takeover must keep (the last checkpoint): runs `change` under this manager's lock,
  // then, when it returns OK, saves the state before any heartbeat can tell of it. Returns
  // what `change` returned. `change` may take one leaf lock.
  absl::Status SaveWith(const std::function<absl::Status(const WorkerReports&)>& change)
      ABSL_LOCKS_EXCLUDED(mu_);

  // --- Durable state ---
  // Installs the saver and saves once at once.
  void SetStateSaver(StateSaver saver) ABSL_LOCKS_EXCLUDED(mu_);
  // Takeover: the table, phase, error and term (state.term + 1) from `state`; the workers'
  // progress re-reported; every live node watched again with kTakeoverGrace.
  // INVALID_ARGUMENT when the state does not fit the spec; nothing changes then.
  absl::Status Restore(const v1::CoordinatorState& state) ABSL_LOCKS_EXCLUDED(mu_);

  uint64_t term() const ABSL_LOCKS_EXCLUDED(mu_);
  v1::JobPhase phase() const ABSL_LOCKS_EXCLUDED(mu_);
  std::string error() const ABSL_LOCKS_EXCLUDED(mu_);
  bool data_lost() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t epoch() const ABSL_LOCKS_EXCLUDED(mu_);
  void GetClusterMap(v1::ClusterMap* map) const ABSL_LOCKS_EXCLUDED(mu_);
  const Membership::Config& config() const { return config_; }

 private:
  bool FinalLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetPhaseLocked(v1::JobPhase phase) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdatePhaseLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LogPhaseChangeLocked(v1::JobPhase from, v1::JobPhase to) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FailJobLocked(const std::string& error) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Declares dead whatever the detector says is; returns the servers among them.
  std::vector<DeadServer> DetectLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The suspected servers whose ports may be probed.
  std::vector<NodeRef> SuspectedServersLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ids of server slots that are recovering or dead ("2", "4").
  std::vector<std::string> RecoveringServersLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t MapVersionLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FillMapLocked(v1::ClusterMap* map) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The current map, built once per MapVersionLocked() and shared by every watcher (with
  // 11,000 of them, one build per watcher held the lock for seconds).
  std::shared_ptr<const v1::ClusterMap> SharedMapLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Wakes watchers when the map changed since the last call, after saving the state (with a
  // saver: on a change, or when the last save is a second old).
  void PublishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SaveStateLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SaveChangeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  ecps::WorkerReports WorkerReportsLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Clock* const clock_;
  const Membership::Config config_;
  const Options options_;
  FailureManager* const failures_;
  ProgressManager* const progress_;
  const Hooks hooks_;
  const absl::Time created_;

  mutable absl::Mutex mu_;
  absl::CondVar map_changed_;
  Membership membership_ ABSL_GUARDED_BY(mu_);
  std::string metrics_address_ ABSL_GUARDED_BY(mu_);
  v1::JobPhase phase_ ABSL_GUARDED_BY(mu_) = v1::JOB_STARTING;
  uint64_t phase_changes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t published_version_ ABSL_GUARDED_BY(mu_) = 0;
  // SharedMapLocked's map, of its version(); whatever FillMapLocked reads must change
  // MapVersionLocked() or reset it.
  std::shared_ptr<const v1::ClusterMap> shared_map_ ABSL_GUARDED_BY(mu_);
  std::string error_ ABSL_GUARDED_BY(mu_);
  bool data_lost_ ABSL_GUARDED_BY(mu_) = false;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t term_ ABSL_GUARDED_BY(mu_) = 1;
  StateSaver saver_ ABSL_GUARDED_BY(mu_);
  absl::Time last_saved_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace ecps

#endif  // ECPS_COORDINATOR_MEMBERSHIP_MANAGER_H_
