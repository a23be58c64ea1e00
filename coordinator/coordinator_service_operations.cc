// CoordinatorService's long cluster operations, apart from the handlers and the phase
// machine in coordinator_service.cc: scrubs, checkpoint saves (admin, periodic, final),
// pruning and the rollback's reload. Each runs its RPCs outside the service's lock;
// checkpoint_mu_ keeps saves, prunes and reloads from overlapping.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_join.h"
#include "coordinator/coordinator_service.h"
#include "proto/ecps.pb.h"
#include "runtime/rpc.h"
#include "runtime/status_macros.h"
#include "spdlog/spdlog.h"

namespace ecps {

void CoordinatorService::SetScrubber(Scrubber scrubber) {
  absl::MutexLock lock(&mu_);
  scrubber_ = std::move(scrubber);
}

absl::Status CoordinatorService::Scrub(const v1::ScrubRequest& request,
                                       v1::ScrubReport* report) {
  RETURN_IF_ERROR(gatekeeper_.Authenticate(request.header()));
  Scrubber scrubber;
  v1::ClusterMap map;
  {
    absl::MutexLock lock(&mu_);
    if (!scrubber_) return absl::FailedPreconditionError("this coordinator cannot scrub");
    if (!membership_.AllServersActive()) {
      return absl::FailedPreconditionError("not every server is active: cannot scrub now");
    }
    scrubber = scrubber_;
    FillMapLocked(&map);
  }
  *report = scrubber(map);
  absl::MutexLock lock(&mu_);
  last_scrub_ = std::make_unique<v1::ScrubReport>(*report);
  SaveChangeLocked();
  return absl::OkStatus();
}

void CoordinatorService::SetCheckpointer(Checkpointer checkpointer) {
  absl::MutexLock lock(&mu_);
  checkpointer_ = std::move(checkpointer);
}

CheckpointProgress CoordinatorService::WorkerCut() const {
  absl::MutexLock lock(&mu_);
  CheckpointProgress cut;
  cut.step = progress_.Summarize(clock_->Now()).step;
  for (int w = 0; w < membership_.num_workers(); ++w) {
    const v1::WorkerProgress* p = membership_.WorkerProgressOf(w);
    cut.reader_positions.push_back(p != nullptr ? p->reader_position() : 0);
  }
  return cut;
}

absl::Status CoordinatorService::Checkpoint(const v1::CheckpointRequest& request,
                                            v1::CheckpointReport* report) {
  RETURN_IF_ERROR(gatekeeper_.Authenticate(request.header()));
  absl::MutexLock serial(&checkpoint_mu_);
  Checkpointer checkpointer;
  v1::ClusterMap map;
  {
    absl::MutexLock lock(&mu_);
    if (!checkpointer_) return absl::FailedPreconditionError("this coordinator cannot checkpoint");
    if (Final()) return absl::FailedPreconditionError("the job has ended: cannot checkpoint now");
    if (!membership_.AllServersActive()) {
      return absl::FailedPreconditionError("not every server is active: cannot checkpoint now");
    }
    if (RollingBackLocked()) {
      return absl::FailedPreconditionError("a rollback is in progress: cannot checkpoint now");
    }
    checkpointer = checkpointer_;
    FillMapLocked(&map);
  }
  *report = checkpointer(map, [this] { return WorkerCut(); });
  {
    absl::MutexLock lock(&mu_);
    last_checkpoint_ = std::make_unique<v1::CheckpointReport>(*report);
    SaveChangeLocked();
  }
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

void CoordinatorService::RunPendingCheckpoint() {
  absl::MutexLock serial(&checkpoint_mu_);
  Checkpointer checkpointer;
  v1::ClusterMap map;
  {
    absl::MutexLock lock(&mu_);
    if (!schedule_.final_pending() || Final()) return;
    if (membership_.AnyServerRecovering()) return;
    checkpointer = checkpointer_;
    FillMapLocked(&map);
  }
  spdlog::info("every worker is done; saving the final checkpoint");
  v1::CheckpointReport report = checkpointer(map, [this] { return WorkerCut(); });
  report.set_final(true);
  // Before the job moves on, so that the directory is in its final state when the job ends.
  if (report.done()) PruneAfterSave(report);
  absl::MutexLock lock(&mu_);
  last_checkpoint_ = std::make_unique<v1::CheckpointReport>(report);
  schedule_.FinalDone();
  SaveChangeLocked();
  const absl::Status saved = SaveStatus(report);
  if (saved.ok()) {
    spdlog::info("final checkpoint of step {} saved to {} ({} bytes, {:.2f} s)", report.step(),
                 report.dir(), report.bytes(), report.seconds());
    UpdatePhaseLocked();
  } else if (saved.code() == absl::StatusCode::kAlreadyExists) {
    spdlog::warn("final checkpoint not saved: {} (the existing one is kept)", report.error());
    UpdatePhaseLocked();
  } else {
    FailJobLocked("final checkpoint failed: " + report.error());
  }
  PublishLocked();
}

void CoordinatorService::SetPruner(Pruner pruner) {
  absl::MutexLock lock(&mu_);
  pruner_ = std::move(pruner);
}

void CoordinatorService::PruneAfterSave(const v1::CheckpointReport& saved) {
  Pruner pruner;
  {
    absl::MutexLock lock(&mu_);
    if (!pruner_) return;
    // A replacement loads the newest checkpoint while it recovers, and a rollback's reload
    // the newest once every server is active: leave every checkpoint alone until then.
    if (RollingBackLocked()) {
      spdlog::info("old checkpoints are kept for now: a rollback is in progress");
      return;
    }
    if (!membership_.AllServersActive()) {
      spdlog::info("old checkpoints are kept for now: not every server is active");
      return;
    }
    pruner = pruner_;
  }
  absl::StatusOr<std::vector<std::string>> removed = pruner(saved);
  if (!removed.ok()) {
    spdlog::warn("old checkpoints not removed: {}", removed.status().ToString());
  } else if (!removed->empty()) {
    spdlog::info("removed {} old checkpoint {}: {}", removed->size(),
                 removed->size() == 1 ? "directory" : "directories", absl::StrJoin(*removed, ", "));
  }
}

void CoordinatorService::RunPeriodicCheckpoint() {
  int64_t step = 0;
  {
    absl::MutexLock lock(&mu_);
    if (!schedule_.periodic() || !checkpointer_ || phase_ != v1::JOB_RUNNING ||
        schedule_.final_pending() || membership_.AllWorkersDone() ||
        !membership_.AllServersActive() || RollingBackLocked()) {
      return;
    }
    const absl::Time now = clock_->Now();
    step = progress_.Summarize(now).step;
    if (!schedule_.PeriodicDue(step, now)) return;
  }
  v1::CheckpointRequest request;
  FillHeader(request.mutable_header(), gatekeeper_.token(Role::kCoordinator), 0, "coordinator");
  v1::CheckpointReport report;
  absl::Status status = Checkpoint(request, &report);
  absl::MutexLock lock(&mu_);
  schedule_.PeriodicTried(std::max(step, report.step()), clock_->Now());
  SaveChangeLocked();
  if (!status.ok()) {
    spdlog::warn("periodic checkpoint at step {} not saved: {}", step, status.ToString());
  }
}

void CoordinatorService::SetReloader(Reloader reloader) {
  absl::MutexLock lock(&mu_);
  reloader_ = std::move(reloader);
}

bool CoordinatorService::BeginRollback() {
  absl::MutexLock lock(&mu_);
  if (!reloader_ || Final()) return false;
  if (absl::Status begun = rollback_.Begin(WorkerReportsLocked()); !begun.ok()) {
    spdlog::error("job '{}': {}", job_name_, std::string(begun.message()));
    return false;
  }
  spdlog::warn(
      "job '{}': rolling back to the last checkpoint (rollback {}): every worker stops, "
      "every server reloads",
      job_name_, rollback_.generation());
  SaveChangeLocked();
  return true;
}

void CoordinatorService::RunPendingRollback() {
  {
    absl::MutexLock lock(&mu_);
    if (rollback_.generation() == 0) return;  // never a rollback: no need to wait for a save
  }
  absl::MutexLock serial(&checkpoint_mu_);  // no save or prune while the servers reload
  Reloader reloader;
  v1::ClusterMap map;
  uint64_t generation = 0;
  {
    absl::MutexLock lock(&mu_);
    // Wait for the replacement to serve and for every worker to have stopped pushing.
    if (Final() || !membership_.AllServersActive() ||
        !rollback_.ReadyToReload(WorkerReportsLocked())) {
      return;
    }
    reloader = reloader_;
    FillMapLocked(&map);
    generation = rollback_.generation();
  }
  absl::StatusOr<v1::CheckpointReport> loaded = reloader(map);
  absl::MutexLock lock(&mu_);
  // Another failure meanwhile (it may be why the reload failed): start over.
  if (generation != rollback_.generation()) return;
  if (!loaded.ok()) {
    FailJobLocked("rollback failed: " + loaded.status().ToString());
    PublishLocked();
    return;
  }
  rollback_.Reloaded(generation, *loaded);
  SaveChangeLocked();
  spdlog::info("job '{}': every server reloaded {} (step {}); workers resume", job_name_,
               loaded->dir(), loaded->step());
}

void CoordinatorService::RunPendingScrub() {
  Scrubber scrubber;
  v1::ClusterMap map;
  {
    absl::MutexLock lock(&mu_);
    if (!final_scrub_.pending() || Final()) return;
    // A recovering server holds rows that are not rebuilt yet: scrub once it is ACTIVE.
    if (membership_.AnyServerRecovering()) return;
    scrubber = scrubber_;
    FillMapLocked(&map);
  }
  spdlog::info("every worker is done; scrubbing parity and replicas");
  v1::ScrubReport report = scrubber(map);
  absl::MutexLock lock(&mu_);
  last_scrub_ = std::make_unique<v1::ScrubReport>(report);
  SaveChangeLocked();
  spdlog::info("{}", FinalScrub::Summary(report));
  if (absl::Status verdict = final_scrub_.Finish(report); !verdict.ok()) {
    FailJobLocked(std::string(verdict.message()));
  } else {
    UpdatePhaseLocked();
  }
  PublishLocked();
}

absl::Status CoordinatorService::SaveStatus(const v1::CheckpointReport& report) {
  if (report.done()) return absl::OkStatus();
  const int code = report.error_code();
  // A report without a code (a checkpointer that sets none) failed all the same.
  if (code <= 0 || code > static_cast<int>(absl::StatusCode::kUnauthenticated)) {
    return absl::AbortedError(report.error());
  }
  return absl::Status(static_cast<absl::StatusCode>(code), report.error());
}

}  // namespace ecps
