#include "worker/worker_metrics.h"

#include "absl/strings/str_cat.h"

namespace ecps {

void AddWorkerMetrics(int id, const v1::WorkerProgress& progress, MetricsBuilder* out) {
  const MetricLabels worker = {{"worker", absl::StrCat(id)}};
  out->Gauge("ecps_worker_step", "Training steps this worker completed",
             static_cast<double>(progress.step()), worker);
  out->Counter("ecps_worker_samples_total", "Samples this worker trained on",
               static_cast<double>(progress.samples()), worker);
  // No rate gauge: the heartbeat's own rate swings with the steps a heartbeat interval
  // happens to hold; rate(ecps_worker_samples_total[...]) or the coordinator's
  // ecps_job_samples_per_second (dated by step) are the readable ones.
  out->Gauge("ecps_worker_loss", "Mean training loss over the last report interval",
             progress.loss(), worker);
  if (progress.eval_auc() >= 0) {
    out->Gauge("ecps_worker_eval_auc", "Latest held-out AUC (worker 0 evaluates)",
               progress.eval_auc(), worker);
    out->Gauge("ecps_worker_eval_logloss", "Latest held-out log loss", progress.eval_logloss(),
               worker);
  }
  out->Counter("ecps_worker_bad_lines_total", "Malformed input lines skipped",
               static_cast<double>(progress.bad_lines()), worker);
  out->Gauge("ecps_worker_done", "1 once this worker has trained all its steps",
             progress.done() ? 1 : 0, worker);
}

}  // namespace ecps
