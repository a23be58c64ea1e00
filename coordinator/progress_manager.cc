#include "coordinator/progress_manager.h"

namespace ecps {
namespace {

bool IsFinal(v1::JobPhase phase) { return phase == v1::JOB_FINISHED || phase == v1::JOB_FAILED; }

}  // namespace

ProgressManager::ProgressManager(const Clock* clock, int num_workers, int64_t total_steps)
    : clock_(clock), progress_(num_workers, total_steps) {}

void ProgressManager::Report(int worker, const v1::WorkerProgress& progress) {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  progress_.Report(worker, progress, now);
}

void ProgressManager::Stopped(int worker) {
  absl::MutexLock lock(&mu_);
  progress_.Stopped(worker);
}

void ProgressManager::PhaseChanged(v1::JobPhase from, v1::JobPhase to) {
  // Leaving STARTING (for RUNNING, or straight on to FINISHED) starts the job's clock.
  const bool started = from == v1::JOB_STARTING && to != v1::JOB_FAILED;
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  if (started || to == v1::JOB_RUNNING) progress_.MarkRunning(now);
  if (IsFinal(to)) progress_.MarkEnded(now);
}

void ProgressManager::MarkRunning() {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  progress_.MarkRunning(now);
}

ProgressSummary ProgressManager::Summarize() const {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  return progress_.Summarize(now);
}

void ProgressManager::FillStatus(v1::StatusResponse* response) const {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  const ProgressSummary summary = progress_.Summarize(now);
  response->set_step(summary.step);
  response->set_total_steps(summary.total_steps);
  response->set_samples(summary.samples);
  response->set_samples_per_s(summary.samples_per_s);
  response->set_loss(summary.loss);
  response->set_eval_auc(summary.eval_auc);
  response->set_eval_logloss(summary.eval_logloss);
  response->set_elapsed_s(summary.elapsed_s);
  response->set_eta_s(summary.eta_s);
  response->set_data_epoch(summary.data_epoch);
  response->set_data_epochs(summary.data_epochs);
  response->set_abft_detections(summary.abft_detections);
  for (v1::NodeInfo& node : *response->mutable_nodes()) {
    if (node.role() == v1::ROLE_WORKER) {
      node.mutable_worker()->set_samples_per_s(progress_.WorkerRate(node.id()));
    }
  }
}

}  // namespace ecps
