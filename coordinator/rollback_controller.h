// The global rollback of fault_tolerance.mode checkpoint (docs/recovery.md, "Mode
// checkpoint"), as state the coordinator keeps under its lock: which rollback is under way
// (a generation that grows with every failure), whether the servers have reloaded, and the
// checkpoint they reloaded. The coordinator service asks it what to do and does the RPCs.
//
// A rollback goes: Begin (a server died) -> every worker stops pushing and reports the
// generation as paused -> once the replacement is ACTIVE, ReadyToReload -> the servers reload
// the last checkpoint -> Reloaded -> workers learn where to resume from heartbeat responses
// (FillHeartbeat) and report resumed_generation. Another failure before that starts a new
// generation; an older reload's result is then ignored (Reloaded refuses it).
// Not thread-safe: the owner serialises every call (CheckpointManager's mutex).
#ifndef ECPS_COORDINATOR_ROLLBACK_CONTROLLER_H_
#define ECPS_COORDINATOR_ROLLBACK_CONTROLLER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "proto/ecps.pb.h"

namespace ecps {

// Each worker's latest report by worker id; null: none yet.
using WorkerReports = std::vector<const v1::WorkerProgress*>;

class RollbackController {
 public:
  // Starts a new rollback generation. FAILED_PRECONDITION, naming the worker, when a worker
  // already finished its steps (a rollback cannot rewind it); nothing changes then.
  absl::Status Begin(const WorkerReports& workers);

  // The current generation; 0: there never was a rollback.
  uint64_t generation() const { return generation_; }
  bool reloaded() const { return ready_; }

  // The servers may reload now: a rollback waits for its reload and every worker reported
  // this generation as paused (so none pushes any more). The caller also waits for every
  // server to be ACTIVE.
  bool ReadyToReload(const WorkerReports& workers) const;

  // The reload of `generation` succeeded with `loaded`. False (and nothing changes) when a
  // newer rollback began meanwhile: it reloads again.
  bool Reloaded(uint64_t generation, const v1::CheckpointReport& loaded);

  // A rollback began and the servers have not all reloaded, or they have and a worker that
  // is not done has not rewound yet (its reports still describe the time before the
  // failure): no checkpoint or prune may run.
  bool RollingBack(const WorkerReports& workers) const;

  // The checkpoint the last reload loaded (empty before one).
  const v1::CheckpointReport& reloaded_to() const { return to_; }
  // Takeover: the rollback as a saved coordinator had it (its generation, reloaded(),
  // reloaded_to()).
  void Restore(uint64_t generation, bool reloaded, const v1::CheckpointReport& to) {
    generation_ = generation;
    ready_ = reloaded;
    to_ = to;
  }

  // What a worker's heartbeat response says of the rollback (nothing before the first).
  void FillHeartbeat(int worker, int num_workers, v1::HeartbeatResponse* response) const;

 private:
  uint64_t generation_ = 0;
  bool ready_ = false;
  v1::CheckpointReport to_;
};

}  // namespace ecps

#endif  // ECPS_COORDINATOR_ROLLBACK_CONTROLLER_H_
