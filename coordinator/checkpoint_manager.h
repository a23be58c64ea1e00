// CheckpointManager: checkpoints and mode checkpoint's rollback, behind locks of their own.
//
// It owns the checkpointer, pruner and reloader the owner installs, the schedule (periodic
// and final saves), the last save's report and the rollback controller, and runs the long
// operations (an admin's checkpoint, the periodic and final saves, pruning, a rollback's
// reload) with their RPCs outside every lock. It asks MembershipManager whether an operation
// may run and tells it the outcome (the phase moves on, or the job fails).
//
// Locks (the coordinator's order is in coordinator_service.h): `ops_mu_` keeps saves, prunes
// and reloads from overlapping; it is taken before MembershipManager's lock and never while
// holding `mu_`. `mu_` guards the state; it is a leaf: held only for a few lines, never while
// calling another manager, and taken under MembershipManager's lock by its hooks (the phase's
// facts, the saved state) and by SaveWith/ReadWorkers callbacks.
#ifndef ECPS_COORDINATOR_CHECKPOINT_MANAGER_H_
#define ECPS_COORDINATOR_CHECKPOINT_MANAGER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/checkpoint_job.h"
#include "coordinator/checkpoint_schedule.h"
#include "runtime/clock.h"
#include "coordinator/membership_manager.h"
#include "coordinator/progress_manager.h"
#include "coordinator/rollback_controller.h"
#include "proto/ecps.pb.h"

namespace ecps {
namespace v1 {
class CoordinatorState;
}  // namespace v1

class CheckpointManager {
 public:
  // The types and contracts of CoordinatorService::SetCheckpointer, SetPruner, SetReloader.
  using Checkpointer = std::function<v1::CheckpointReport(
      const v1::ClusterMap& map, const std::function<CheckpointProgress()>& progress)>;
  using Pruner =
      std::function<absl::StatusOr<std::vector<std::string>>(const v1::CheckpointReport& saved)>;
  using Reloader = std::function<absl::StatusOr<v1::CheckpointReport>(const v1::ClusterMap&)>;

  // `schedule`: the mode's periodic and final saves. `clock`, `membership` and `progress`
  // must outlive the manager.
  CheckpointManager(const Clock* clock, CheckpointSchedule schedule, std::string job_name,
                    MembershipManager* membership, ProgressManager* progress);
  CheckpointManager(const CheckpointManager&) = delete;
  CheckpointManager& operator=(const CheckpointManager&) = delete;

  void SetCheckpointer(Checkpointer checkpointer) ABSL_LOCKS_EXCLUDED(mu_);
  void SetPruner(Pruner pruner) ABSL_LOCKS_EXCLUDED(mu_);
  void SetReloader(Reloader reloader) ABSL_LOCKS_EXCLUDED(mu_);

  // The operations of coordinator_service.h, with the same contracts (Checkpoint after the
  // caller authenticated the request).
  absl::Status Checkpoint(v1::CheckpointReport* report) ABSL_LOCKS_EXCLUDED(ops_mu_, mu_);
  void RunPendingCheckpoint() ABSL_LOCKS_EXCLUDED(ops_mu_, mu_);
  void RunPeriodicCheckpoint() ABSL_LOCKS_EXCLUDED(ops_mu_, mu_);
  bool BeginRollback() ABSL_LOCKS_EXCLUDED(ops_mu_, mu_);
  void RunPendingRollback() ABSL_LOCKS_EXCLUDED(ops_mu_, mu_);

  // What a worker's heartbeat response says of the rollback.
  void FillHeartbeat(int worker, int num_workers, v1::HeartbeatResponse* response) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // The phase machine's facts (MembershipManager::Hooks): a final save is configured and not
  // done yet; every worker is done, so it may run now.
  bool FinalWanted() const ABSL_LOCKS_EXCLUDED(mu_);
  void RequestFinal() ABSL_LOCKS_EXCLUDED(mu_);

  // Its part of the saved state: the last save, the schedule, the rollback.
  void Save(v1::CoordinatorState* state) const ABSL_LOCKS_EXCLUDED(mu_);
  void Restore(const v1::CoordinatorState& state) ABSL_LOCKS_EXCLUDED(mu_);
  // The last save's report into a Status response.
  void FillStatus(v1::StatusResponse* response) const ABSL_LOCKS_EXCLUDED(mu_);

  // The status of a save from its report: OK when it committed, else the save's own error
  // code (ALREADY_EXISTS for a step saved before) with its message.
  static absl::Status SaveStatus(const v1::CheckpointReport& report);

 private:
  // Checkpoint's body; the caller holds ops_mu_.
  absl::Status SaveNow(v1::CheckpointReport* report)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(ops_mu_) ABSL_LOCKS_EXCLUDED(mu_);
  // The workers' latest step (minimum) and reader positions.
  CheckpointProgress WorkerCut() const ABSL_LOCKS_EXCLUDED(mu_);
  bool RollingBack() const ABSL_LOCKS_EXCLUDED(mu_);
  // Records a save's report (with `final_done`: the final save ran) and saves the state.
  void Record(const v1::CheckpointReport& report, bool final_done) ABSL_LOCKS_EXCLUDED(mu_);
  // Runs the pruner after the save `saved` committed, when that is safe (see SetPruner).
  void PruneAfterSave(const v1::CheckpointReport& saved)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(ops_mu_) ABSL_LOCKS_EXCLUDED(mu_);

  const Clock* const clock_;
  const std::string job_name_;
  MembershipManager* const membership_;
  ProgressManager* const progress_;

  // One save, prune or rollback reload at a time; taken before MembershipManager's lock.
  absl::Mutex ops_mu_;
  mutable absl::Mutex mu_;
  Checkpointer checkpointer_ ABSL_GUARDED_BY(mu_);
  Pruner pruner_ ABSL_GUARDED_BY(mu_);
  Reloader reloader_ ABSL_GUARDED_BY(mu_);
  CheckpointSchedule schedule_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<v1::CheckpointReport> last_checkpoint_ ABSL_GUARDED_BY(mu_);  // null: none
  RollbackController rollback_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ecps

#endif  // ECPS_COORDINATOR_CHECKPOINT_MANAGER_H_
