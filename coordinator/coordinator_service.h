// CoordinatorService: the coordinator's RPC handlers as a plain, thread-safe C++ class.
//
// It owns the membership table, the failure detector and the job progress, and drives the
// job phase:
//   JOB_STARTING --(every server slot ACTIVE, every worker registered)--> JOB_RUNNING
//   JOB_RUNNING  <--> JOB_RECOVERING while some server slot is held by a RECOVERING
//                replacement or by a dead instance waiting for one
//   JOB_RUNNING  --(every worker reported done)--> JOB_FINISHED (after the final checkpoint
//                when a checkpointer is set and checkpoint.save_final; in modes with parity,
//                after the final scrub; both wait until no server is recovering)
//   any non-final phase --> JOB_FAILED (with error()) when a worker reports an error, a
//   server is declared dead and no ServerDeadHandler takes charge, or not everything was
//   registered and ACTIVE within the startup timeout.
// A worker declared dead does not fail the job: its slot waits for a replacement process
// (registering with the same id), which gets the dead worker's last progress to resume from.
// Every death, replacement and recovery is recorded in the failure history (Status).
// FINISHED and FAILED are final. Nodes learn the phase from heartbeat responses.
//
// Every handler checks the request header's token first: a wrong token returns
// UNAUTHENTICATED and changes nothing (the gRPC glue has already refused a caller whose role
// may not call the method: runtime/access_policy.h). Register and Heartbeat accept any epoch (nodes learn
// the epoch from the coordinator). A handler that returns an error changes nothing.
//
// Time comes only from the injected clock; the owner calls Tick() periodically (and tests
// call it after advancing a FakeClock) to run failure detection and the startup timeout, and
// the Run* methods (the long cluster operations) periodically on another thread, so that a
// slow save never delays detection (coordinator_loop.h does both).
// The gRPC glue (GrpcCoordinator) only adapts these methods.
//
// The service is a thin composition of one manager per concern, each with its own lock:
//   MembershipManager  the node table, the phase, the term, the map and its watchers, and the
//                      state's saving (membership_manager.h)
//   FailureManager     detector, failure history, kills, resume steps, data loss
//   ProgressManager    steps, samples, loss, eval, rate, ETA
//   CheckpointManager  checkpointer, schedule, pruning, the rollback
//   ScrubManager       scrubber, final scrub, last report
// Lock order: CheckpointManager's ops lock -> MembershipManager's -> one leaf lock (the
// failure, progress, checkpoint and scrub managers' own) at a time. MembershipManager is the
// only one that calls others while holding its lock (so that a change of the map is saved,
// whole, before anyone hears of it); the leaves never call out, and the checkpoint and scrub
// operations call MembershipManager holding none of their own. Handlers and hooks that run
// user code (ServerDeadHandler, Checkpointer, Scrubber, ...) run without any lock.
#ifndef ECPS_COORDINATOR_COORDINATOR_SERVICE_H_
#define ECPS_COORDINATOR_COORDINATOR_SERVICE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator/checkpoint_manager.h"
#include "runtime/clock.h"
#include "coordinator/failure_manager.h"
#include "coordinator/membership_manager.h"
#include "coordinator/progress_manager.h"
#include "coordinator/scrub_manager.h"
#include "proto/ecps.pb.h"
#include "domain/placement.h"
#include "runtime/security.h"
#include "runtime/spec.h"

namespace ecps {
namespace v1 {
class CheckpointReport;
class CheckpointRequest;
class ClusterMap;
class CoordinatorState;
class HeartbeatRequest;
class HeartbeatResponse;
class KillRequest;
class KillResponse;
class RegisterRequest;
class RegisterResponse;
class ReportFailureRequest;
class ReportFailureResponse;
class ScrubReport;
class ScrubRequest;
class StatusRequest;
class StatusResponse;
class WatchClusterMapRequest;
enum JobPhase : int;
}  // namespace v1

// kTakeoverGrace: membership_manager.h.

struct CoordinatorServiceOptions {
  // The job fails when not every server is ACTIVE and every worker registered by then.
  absl::Duration startup_timeout = absl::Seconds(120);
  // Heartbeat timeout; zero: the spec's cluster.heartbeat_timeout_ms.
  absl::Duration heartbeat_timeout = absl::ZeroDuration();
  // Staleness that confirms a peer's failure report; zero: heartbeat_timeout / 3.
  absl::Duration suspicion_timeout = absl::ZeroDuration();
  // Asked, outside the lock, right after a server is reported failed and on every tick while
  // it stays suspected: true when its process is surely gone (process_probe.h), which
  // confirms the report at once. Empty: reports wait for the suspicion timeout.
  std::function<bool(const std::string& address)> process_gone;
  // How often a blocked WatchClusterMap wakes up to notice a cancelled client.
  absl::Duration watch_wakeup = absl::Milliseconds(200);
};

class CoordinatorService {
 public:
  // Called when the server holding logical id `server_id` has been declared dead (after the
  // epoch bump and the new map were published), from the thread that ran the detection,
  // without the service's lock held (it may call back into the service). Returns true when
  // it takes charge of recovery; false makes the job fail. The recovery work plugs in here;
  // coordinator_main installs one in modes with parity (it calls ReplaceServer); without a
  // handler a dead server fails the job.
  using ServerDeadHandler = std::function<bool(int server_id)>;

  // Validates the parts of `spec` the coordinator uses (server/worker counts, timeouts,
  // fault-tolerance mode and k/r): INVALID_ARGUMENT when they are unusable. `clock` must
  // outlive the service.
  static absl::StatusOr<std::unique_ptr<CoordinatorService>> Create(
      const JobSpec& spec, std::string token, const Clock* clock,
      CoordinatorServiceOptions options = {});

  CoordinatorService(const CoordinatorService&) = delete;
  CoordinatorService& operator=(const CoordinatorService&) = delete;
  ~CoordinatorService();

  // Registers a server or worker (rules in membership.h). OK: `response` holds the assigned
  // id, the state and the current map. ALREADY_EXISTS: the id is held by a live instance;
  // INVALID_ARGUMENT: bad role, id out of range, missing instance/address.
  absl::Status Register(const v1::RegisterRequest& request, v1::RegisterResponse* response);

  // Where the coordinator serves /metrics (StatusResponse.metrics_address). Set once, before
  // serving.
  void set_metrics_address(std::string address) {
    membership_.set_metrics_address(std::move(address));
  }

  // Records liveness, the node's own state and its stats/progress. OK with fenced=true when
  // the instance does not hold its id (or was declared dead): nothing is recorded and the
  // node must exit. The response always carries the current epoch and phase.
  absl::Status Heartbeat(const v1::HeartbeatRequest& request, v1::HeartbeatResponse* response);

  // A peer reports that a node failed. The node becomes SUSPECT at once; it is declared dead
  // only if its last heartbeat is also older than the suspicion timeout (now or at a later
  // Tick); a heartbeat clears the suspicion. INVALID_ARGUMENT for an id out of range,
  // FAILED_PRECONDITION for a node that never registered. A report about a dead or finished
  // node is accepted and ignored.
  absl::Status ReportFailure(const v1::ReportFailureRequest& request,
                             v1::ReportFailureResponse* response);

  // Admin: the live node holding role/id gets kill = true in its next heartbeat response (it
  // then raises SIGKILL on itself; its death is detected like any other). `response` names the
  // instance and pid. INVALID_ARGUMENT for a bad role or id, FAILED_PRECONDITION when the slot
  // is not registered or its holder is dead or finished.
  absl::Status Kill(const v1::KillRequest& request, v1::KillResponse* response);

  // Recovery of a dead server slot (what the ServerDeadHandler of a mode with parity calls):
  // gives the slot to a standby spare at once (NODE_RECOVERING, epoch + 1, map published) and
  // returns true; returns false when no spare is left (the slot then waits for a replacement
  // process to register with the id) or the slot is not dead.
  bool ReplaceServer(int server_id);

  // The job's status: phase, progress, every registered node with its heartbeat age, stats,
  // the failure history.
  absl::Status Status(const v1::StatusRequest& request, v1::StatusResponse* response);

  // Streams the cluster map to `send`: the current map at once when its (epoch, version) is
  // newer than the request's (known_epoch, known_version), then the latest map after every
  // change (changes that happen between two sends are coalesced). Blocks until `send`
  // returns false or `cancelled()` returns true (OK), or Shutdown() is called
  // (UNAVAILABLE). `cancelled` is polled at least every options.watch_wakeup.
  absl::Status WatchClusterMap(const v1::WatchClusterMapRequest& request,
                               const std::function<bool()>& cancelled,
                               const std::function<bool(const v1::ClusterMap&)>& send);

  // Runs failure detection and the startup timeout at the clock's current time. Detection
  // stops once the job is FINISHED or FAILED.
  void Tick();
  // The coordinator's own threads were not scheduled for `duration` (CoordinatorLoop saw its
  // detection round start that late): nobody could be heard, so every node's deadline moves
  // on by it (FailureDetector::Deaf). Its state's saves, which hold the lock that heartbeats
  // need, are counted the same way by the service itself.
  void Stalled(absl::Duration duration);

  // Wakes and ends every WatchClusterMap stream (now and later). Idempotent.
  void Shutdown();

  void SetServerDeadHandler(ServerDeadHandler handler);

  // Checks parity and dense replicas across the servers of `map` (coordinator/scrub.h in
  // production; tests inject their own). Set before the job starts.
  using Scrubber = ScrubManager::Scrubber;
  void SetScrubber(Scrubber scrubber);

  // Admin: scrubs now (while training runs: the servers freeze for the scrub's duration).
  // FAILED_PRECONDITION without a scrubber or before every server is active.
  absl::Status Scrub(const v1::ScrubRequest& request, v1::ScrubReport* report);

  // In modes with parity (erasure_code, replication), when every worker is done the job
  // waits in RUNNING for a final scrub instead of finishing; this runs it (outside the lock,
  // from the coordinator's loop) and then finishes the job, or fails it when the scrub
  // found a mismatch. A no-op when no final scrub is pending.
  void RunPendingScrub();

  // Saves a checkpoint of the servers of `map`; calls `progress` once every server is frozen
  // for the step and reader positions to record (coordinator/checkpoint_job.h in production).
  using Checkpointer = CheckpointManager::Checkpointer;
  void SetCheckpointer(Checkpointer checkpointer);

  // Admin: checkpoints now (training pauses while the servers are frozen). The step and
  // reader positions recorded are the workers' latest reports when every server is frozen:
  // the servers may hold the updates of a few later steps (up to one heartbeat interval), which
  // a resumed job trains again. OK with the report (dir, step) when it was committed;
  // FAILED_PRECONDITION without a checkpointer, once the job ended, or while a server is not
  // active; ALREADY_EXISTS when a checkpoint of this step exists; ABORTED with the reason when
  // the save failed (nothing is published). Also FAILED_PRECONDITION while a rollback is in
  // progress (the servers hold no consistent state until every one has reloaded).
  absl::Status Checkpoint(const v1::CheckpointRequest& request, v1::CheckpointReport* report);

  // Deletes old checkpoints after a save that committed (checkpoint/store.h PruneCheckpoints
  // with checkpoint.keep in production), given the save's report; returns the directories it
  // removed. Called after every committed save (ecps checkpoint, periodic, final; the final one
  // before the job moves on), never at the same time as another save or a rollback's reload,
  // and not at all while a rollback is in progress or some server is not active (a replacement
  // may be loading the newest checkpoint then; the next save prunes). An error is logged, not
  // fatal. Without a pruner nothing is deleted.
  using Pruner = CheckpointManager::Pruner;
  void SetPruner(Pruner pruner);

  // With a checkpointer and checkpoint.save_final, when every worker is done the job waits in
  // RUNNING for a final checkpoint (exact: every worker's final step and reader position);
  // this saves it (outside the lock, from the coordinator's loop) and lets the job go on to the
  // final scrub or FINISHED, or fails the job when the save failed. A checkpoint of that step
  // that already exists (the same job run again into the same directory) is kept, with a
  // warning.
  void RunPendingCheckpoint();

  // In fault_tolerance.mode checkpoint, with a checkpointer: while the job runs with every
  // server active, saves a checkpoint (as Checkpoint does) once the job's step advanced
  // checkpoint.interval_steps since the last one, or checkpoint.interval_seconds passed.
  // Called from the coordinator's loop; a no-op in other modes. A failed save is logged, not
  // fatal.
  void RunPeriodicCheckpoint();

  // Mode checkpoint, a server failure (what coordinator_main's ServerDeadHandler calls after
  // ReplaceServer): starts a global rollback. Workers learn it from heartbeat responses, stop
  // and report paused_generation; once the dead slot's replacement is ACTIVE and every worker
  // paused, RunPendingRollback has every server reload the last checkpoint (the Reloader) and
  // tells the workers to resume from its step and reader positions. Returns false (the job
  // then fails) without a reloader, once the job ended, or when every worker is already done.
  using Reloader = CheckpointManager::Reloader;
  void SetReloader(Reloader reloader);
  bool BeginRollback();
  // Called from the coordinator's loop; a no-op unless a rollback waits. A failed reload fails
  // the job, unless another server failed meanwhile (the rollback then starts over). Never
  // runs at the same time as a save.
  void RunPendingRollback();

  // Durable state (docs/recovery.md, "The coordinator's state log"): `saver` is called, under
  // MembershipManager's lock, with the whole state before a membership or phase change is
  // published (watchers woken, responses sent) and at most once a second otherwise (the
  // workers' progress). A failed save is logged; the job goes on. Saves once at once (OK
  // even when that save failed: it was logged, as any other).
  using StateSaver = MembershipManager::StateSaver;
  absl::Status SetStateSaver(StateSaver saver);
  // Takeover: replaces the membership, phase, failure history and the workers' progress with
  // `state` (what a saver got), raises the term to state.term + 1, and gives every live node a
  // fresh heartbeat deadline (one that does not heartbeat within the heartbeat timeout is
  // declared dead as usual). Call before serving. INVALID_ARGUMENT when the state does not fit
  // the spec; nothing changes then.
  absl::Status Restore(const v1::CoordinatorState& state);
  // 1 for a coordinator that started the job, + 1 per takeover.
  uint64_t term() const;

  v1::JobPhase phase() const;
  std::string error() const;  // why the job failed ("" unless FAILED)
  bool data_lost() const;     // it failed because data was lost
  uint64_t epoch() const;
  // A copy of the current map (what WatchClusterMap would send).
  void GetClusterMap(v1::ClusterMap* map) const;

  // Checks callers' credentials (the gRPC glue's first check).
  const Gatekeeper& gatekeeper() const { return gatekeeper_; }

 private:
  CoordinatorService(const JobSpec& spec, std::string token, const Clock* clock,
                     CoordinatorServiceOptions options, Membership::Config config,
                     FailureManager::Options failure_options);

  // Hands each dead server to the ServerDeadHandler (without a lock), unless the job ended
  // or data was lost (the job then fails at once, data_lost set); fails the job for those it
  // does not take.
  void HandleDeadServers(const std::vector<MembershipManager::DeadServer>& dead);
  // Probes each (its port refuses connections?); declares dead at once those whose process
  // is gone.
  void ProbeSuspected(const std::vector<NodeRef>& servers);

  const Gatekeeper gatekeeper_;  // from the job secret
  // Construction order is the order of dependence: each manager may use those above it.
  FailureManager failures_;
  ProgressManager progress_;
  MembershipManager membership_;
  CheckpointManager checkpoints_;
  ScrubManager scrubs_;
};

}  // namespace ecps

#endif  // ECPS_COORDINATOR_COORDINATOR_SERVICE_H_
