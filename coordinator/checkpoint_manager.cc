#include "coordinator/checkpoint_manager.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_join.h"
#include "proto/coordinator_state.pb.h"
#include "spdlog/spdlog.h"

namespace ecps {

CheckpointManager::CheckpointManager(const Clock* clock, CheckpointSchedule schedule,
                                     std::string job_name, MembershipManager* membership,
                                     ProgressManager* progress)
    : clock_(clock),
      job_name_(std::move(job_name)),
      membership_(membership),
      progress_(progress),
      schedule_(std::move(schedule)) {}

void CheckpointManager::SetCheckpointer(Checkpointer checkpointer) {
  absl::MutexLock lock(&mu_);
  checkpointer_ = std::move(checkpointer);
}

void CheckpointManager::SetPruner(Pruner pruner) {
  absl::MutexLock lock(&mu_);
  pruner_ = std::move(pruner);
}

void CheckpointManager::SetReloader(Reloader reloader) {
  absl::MutexLock lock(&mu_);
  reloader_ = std::move(reloader);
}

CheckpointProgress CheckpointManager::WorkerCut() const {
  CheckpointProgress cut;
  cut.step = progress_->Summarize().step;
  membership_->ReadWorkers([&cut](const WorkerReports& workers) {
    for (const v1::WorkerProgress* p : workers) {
      cut.reader_positions.push_back(p != nullptr ? p->reader_position() : 0);
    }
  });
  return cut;
}

bool CheckpointManager::RollingBack() const {
  bool rolling_back = false;
  membership_->ReadWorkers([this, &rolling_back](const WorkerReports& workers) {
    absl::MutexLock lock(&mu_);
    rolling_back = rollback_.RollingBack(workers);
  });
  return rolling_back;
}

void CheckpointManager::Record(const v1::CheckpointReport& report, bool final_done) {
  // Saved with the rest of the state before Status (or a takeover's Status) can show it.
  membership_->SaveWith([&](const WorkerReports&) {
    absl::MutexLock lock(&mu_);
    last_checkpoint_ = std::make_unique<v1::CheckpointReport>(report);
    if (final_done) schedule_.FinalDone();
    return absl::OkStatus();
  }).IgnoreError();  // the change above never fails
}

absl::Status CheckpointManager::Checkpoint(v1::CheckpointReport* report) {
  absl::MutexLock serial(&ops_mu_);
  return SaveNow(report);
}

absl::Status CheckpointManager::SaveNow(v1::CheckpointReport* report) {
  Checkpointer checkpointer;
  {
    absl::MutexLock lock(&mu_);
    if (!checkpointer_) return absl::FailedPreconditionError("this coordinator cannot checkpoint");
    checkpointer = checkpointer_;
  }
  v1::ClusterMap map;
  const JobView job = membership_->View(&map);
  if (job.final) return absl::FailedPreconditionError("the job has ended: cannot checkpoint now");
  if (!job.all_servers_active) {
    return absl::FailedPreconditionError("not every server is active: cannot checkpoint now");
  }
  if (RollingBack()) {
    return absl::FailedPreconditionError("a rollback is in progress: cannot checkpoint now");
  }
  *report = checkpointer(map, [this] { return WorkerCut(); });
  Record(*report, /*final_done=*/false);
  if (report->done()) {
    spdlog::info("checkpoint of step {} saved to {} ({} bytes, {:.2f} s)", report->step(),
                 report->dir(), report->bytes(), report->seconds());
    PruneAfterSave(*report);
    return absl::OkStatus();
  }
  spdlog::error("checkpoint failed: {}", report->error());
  absl::Status failed = SaveStatus(*report);
  if (failed.code() == absl::StatusCode::kAlreadyExists) return failed;
  return absl::AbortedError("checkpoint failed: " + report->error());
}

void CheckpointManager::RunPendingCheckpoint() {
  absl::MutexLock serial(&ops_mu_);
  Checkpointer checkpointer;
  {
    absl::MutexLock lock(&mu_);
    if (!schedule_.final_pending()) return;
    checkpointer = checkpointer_;
  }
  v1::ClusterMap map;
  const JobView job = membership_->View(&map);
  if (job.final || job.any_server_recovering) return;
  spdlog::info("every worker is done; saving the final checkpoint");
  v1::CheckpointReport report = checkpointer(map, [this] { return WorkerCut(); });
  report.set_final(true);
  // Before the job moves on, so that the directory is in its final state when the job ends.
  if (report.done()) PruneAfterSave(report);
  Record(report, /*final_done=*/true);
  const absl::Status saved = SaveStatus(report);
  if (saved.ok()) {
    spdlog::info("final checkpoint of step {} saved to {} ({} bytes, {:.2f} s)", report.step(),
                 report.dir(), report.bytes(), report.seconds());
    membership_->Advance();
  } else if (saved.code() == absl::StatusCode::kAlreadyExists) {
    spdlog::warn("final checkpoint not saved: {} (the existing one is kept)", report.error());
    membership_->Advance();
  } else {
    membership_->Fail("final checkpoint failed: " + report.error());
  }
}

void CheckpointManager::PruneAfterSave(const v1::CheckpointReport& saved) {
  Pruner pruner;
  {
    absl::MutexLock lock(&mu_);
    if (!pruner_) return;
    pruner = pruner_;
  }
  // A replacement loads the newest checkpoint while it recovers, and a rollback's reload
  // the newest once every server is active: leave every checkpoint alone until then.
  if (RollingBack()) {
    spdlog::info("old checkpoints are kept for now: a rollback is in progress");
    return;
  }
  if (!membership_->View().all_servers_active) {
    spdlog::info("old checkpoints are kept for now: not every server is active");
    return;
  }
  absl::StatusOr<std::vector<std::string>> removed = pruner(saved);
  if (!removed.ok()) {
    spdlog::warn("old checkpoints not removed: {}", removed.status().ToString());
  } else if (!removed->empty()) {
    spdlog::info("removed {} old checkpoint {}: {}", removed->size(),
                 removed->size() == 1 ? "directory" : "directories", absl::StrJoin(*removed, ", "));
  }
}

void CheckpointManager::RunPeriodicCheckpoint() {
  {
    absl::MutexLock lock(&mu_);
    if (!schedule_.periodic() || !checkpointer_ || schedule_.final_pending()) return;
  }
  const JobView job = membership_->View();
  if (job.phase != v1::JOB_RUNNING || job.all_workers_done || !job.all_servers_active ||
      RollingBack()) {
    return;
  }
  const int64_t step = progress_->Summarize().step;
  {
    absl::MutexLock lock(&mu_);
    if (!schedule_.PeriodicDue(step, clock_->Now())) return;
  }
  v1::CheckpointReport report;
  absl::Status status;
  {
    absl::MutexLock serial(&ops_mu_);
    status = SaveNow(&report);
  }
  membership_->SaveWith([&](const WorkerReports&) {
    absl::MutexLock lock(&mu_);
    schedule_.PeriodicTried(std::max(step, report.step()), clock_->Now());
    return absl::OkStatus();
  }).IgnoreError();  // the change above never fails
  if (!status.ok()) {
    spdlog::warn("periodic checkpoint at step {} not saved: {}", step, status.ToString());
  }
}

bool CheckpointManager::BeginRollback() {
  {
    absl::MutexLock lock(&mu_);
    if (!reloader_) return false;
  }
  if (membership_->View().final) return false;
  const absl::Status begun = membership_->SaveWith([this](const WorkerReports& workers) {
    absl::MutexLock lock(&mu_);
    return rollback_.Begin(workers);
  });
  if (!begun.ok()) {
    spdlog::error("job '{}': {}", job_name_, std::string(begun.message()));
    return false;
  }
  absl::MutexLock lock(&mu_);
  spdlog::warn(
      "job '{}': rolling back to the last checkpoint (rollback {}): every worker stops, "
      "every server reloads",
      job_name_, rollback_.generation());
  return true;
}

void CheckpointManager::RunPendingRollback() {
  {
    absl::MutexLock lock(&mu_);
    if (rollback_.generation() == 0) return;  // never a rollback: no need to wait for a save
  }
  absl::MutexLock serial(&ops_mu_);  // no save or prune while the servers reload
  v1::ClusterMap map;
  const JobView job = membership_->View(&map);
  // Wait for the replacement to serve and for every worker to have stopped pushing.
  if (job.final || !job.all_servers_active) return;
  Reloader reloader;
  uint64_t generation = 0;
  membership_->ReadWorkers([&](const WorkerReports& workers) {
    absl::MutexLock lock(&mu_);
    if (!rollback_.ReadyToReload(workers)) return;
    reloader = reloader_;
    generation = rollback_.generation();
  });
  if (!reloader) return;
  absl::StatusOr<v1::CheckpointReport> loaded = reloader(map);
  bool superseded = false;
  membership_->SaveWith([&](const WorkerReports&) {
    absl::MutexLock lock(&mu_);
    // Another failure meanwhile (it may be why the reload failed): start over.
    superseded = generation != rollback_.generation();
    if (superseded || !loaded.ok()) return absl::AbortedError("nothing to save");
    rollback_.Reloaded(generation, *loaded);
    return absl::OkStatus();
  }).IgnoreError();  // an error only says that nothing changed
  if (superseded) return;
  if (!loaded.ok()) {
    membership_->Fail("rollback failed: " + loaded.status().ToString());
    return;
  }
  spdlog::info("job '{}': every server reloaded {} (step {}); workers resume", job_name_,
               loaded->dir(), loaded->step());
}

void CheckpointManager::FillHeartbeat(int worker, int num_workers,
                                      v1::HeartbeatResponse* response) const {
  absl::MutexLock lock(&mu_);
  rollback_.FillHeartbeat(worker, num_workers, response);
}

bool CheckpointManager::FinalWanted() const {
  absl::MutexLock lock(&mu_);
  return checkpointer_ && schedule_.final_wanted();
}

void CheckpointManager::RequestFinal() {
  absl::MutexLock lock(&mu_);
  schedule_.RequestFinal();
}

void CheckpointManager::Save(v1::CoordinatorState* state) const {
  absl::MutexLock lock(&mu_);
  if (last_checkpoint_ != nullptr) *state->mutable_last_checkpoint() = *last_checkpoint_;
  state->set_rollback_generation(rollback_.generation());
  state->set_rollback_reloaded(rollback_.reloaded());
  *state->mutable_rollback_to() = rollback_.reloaded_to();
  state->set_checkpoint_last_step(schedule_.last_step());
  if (schedule_.last_time()) {
    state->set_checkpoint_last_unix_micros(absl::ToUnixMicros(*schedule_.last_time()));
  }
  state->set_final_checkpoint_done(schedule_.final_done());
}

void CheckpointManager::Restore(const v1::CoordinatorState& state) {
  absl::MutexLock lock(&mu_);
  last_checkpoint_ = state.has_last_checkpoint()
                         ? std::make_unique<v1::CheckpointReport>(state.last_checkpoint())
                         : nullptr;
  rollback_.Restore(state.rollback_generation(), state.rollback_reloaded(), state.rollback_to());
  std::optional<absl::Time> last_periodic;
  if (state.checkpoint_last_unix_micros() != 0) {
    last_periodic = absl::FromUnixMicros(state.checkpoint_last_unix_micros());
  }
  schedule_.Restore(state.checkpoint_last_step(), last_periodic, state.final_checkpoint_done());
}

void CheckpointManager::FillStatus(v1::StatusResponse* response) const {
  absl::MutexLock lock(&mu_);
  if (last_checkpoint_ != nullptr) *response->mutable_checkpoint() = *last_checkpoint_;
}

absl::Status CheckpointManager::SaveStatus(const v1::CheckpointReport& report) {
  if (report.done()) return absl::OkStatus();
  const int code = report.error_code();
  // A report without a code (a checkpointer that sets none) failed all the same.
  if (code <= 0 || code > static_cast<int>(absl::StatusCode::kUnauthenticated)) {
    return absl::AbortedError(report.error());
  }
  return absl::Status(static_cast<absl::StatusCode>(code), report.error());
}

}  // namespace ecps
