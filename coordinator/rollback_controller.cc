#include "coordinator/rollback_controller.h"

#include "absl/strings/str_cat.h"

namespace ecps {

absl::Status RollbackController::Begin(const WorkerReports& workers) {
  for (size_t w = 0; w < workers.size(); ++w) {
    if (workers[w] != nullptr && workers[w]->done()) {
      return absl::FailedPreconditionError(
          absl::StrCat("worker ", w, " already finished its steps: a rollback cannot rewind it"));
    }
  }
  ++generation_;
  ready_ = false;
  return absl::OkStatus();
}

bool RollbackController::ReadyToReload(const WorkerReports& workers) const {
  if (generation_ == 0 || ready_) return false;
  for (const v1::WorkerProgress* p : workers) {
    if (p == nullptr || p->paused_generation() != generation_) return false;
  }
  return true;
}

bool RollbackController::Reloaded(uint64_t generation, const v1::CheckpointReport& loaded) {
  if (generation != generation_) return false;
  to_ = loaded;
  ready_ = true;
  return true;
}

bool RollbackController::RollingBack(const WorkerReports& workers) const {
  if (generation_ == 0) return false;
  if (!ready_) return true;
  for (const v1::WorkerProgress* p : workers) {
    if (p == nullptr) return true;
    if (!p->done() && p->resumed_generation() < generation_) return true;
  }
  return false;
}

void RollbackController::FillHeartbeat(int worker, int num_workers,
                                       v1::HeartbeatResponse* response) const {
  if (generation_ == 0) return;
  v1::Rollback* rollback = response->mutable_rollback();
  rollback->set_generation(generation_);
  rollback->set_ready(ready_);
  if (!ready_) return;
  rollback->set_dir(to_.dir());
  rollback->set_step(to_.step());
  // -1: the checkpoint does not record this job's workers' positions (another worker count).
  const bool positions = to_.reader_positions_size() == num_workers && worker >= 0 &&
                         worker < num_workers;
  rollback->set_reader_position(positions ? to_.reader_positions(worker) : -1);
}

}  // namespace ecps
