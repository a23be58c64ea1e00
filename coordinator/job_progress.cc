#include "coordinator/job_progress.h"

#include <algorithm>
#include <limits>

#include "proto/ecps.pb.h"

namespace ecps {

JobProgress::JobProgress(int num_workers, int64_t total_steps)
    : total_steps_(total_steps), workers_(std::max(0, num_workers)) {}

void JobProgress::Report(int worker, const v1::WorkerProgress& progress) {
  if (worker < 0 || worker >= static_cast<int>(workers_.size())) return;
  Latest& w = workers_[worker];
  w.reported = true;
  w.step = progress.step();
  w.samples = progress.samples();
  w.samples_per_s = progress.samples_per_s();
  w.loss = progress.loss();
  w.done = progress.done();
  if (progress.eval_auc() > 0) {
    w.eval_auc = progress.eval_auc();
    w.eval_logloss = progress.eval_logloss();
    w.eval_step = progress.eval_step();
  }
}

void JobProgress::MarkRunning(absl::Time t) {
  if (!running_since_) running_since_ = t;
}

void JobProgress::MarkEnded(absl::Time t) {
  if (!ended_at_) ended_at_ = t;
}

ProgressSummary JobProgress::Summarize(absl::Time now) const {
  ProgressSummary s;
  s.total_steps = total_steps_;
  int64_t min_step = workers_.empty() ? 0 : std::numeric_limits<int64_t>::max();
  double loss_sum = 0;
  int loss_count = 0;
  for (const Latest& w : workers_) {
    min_step = std::min(min_step, w.reported ? w.step : int64_t{0});
    s.samples += w.samples;
    if (!w.done) s.samples_per_s += w.samples_per_s;
    if (w.reported && w.step > 0) {
      loss_sum += w.loss;
      ++loss_count;
    }
    if (w.eval_auc > 0 && w.eval_step > s.eval_step) {
      s.eval_step = w.eval_step;
      s.eval_auc = w.eval_auc;
      s.eval_logloss = w.eval_logloss;
    }
  }
  s.step = min_step;
  s.loss = loss_count > 0 ? loss_sum / loss_count : 0;

  if (running_since_) {
    const absl::Time end = ended_at_ ? std::max(*ended_at_, *running_since_) : now;
    s.elapsed_s = std::max(0.0, absl::ToDoubleSeconds(end - *running_since_));
  }
  if (ended_at_) {
    s.eta_s = 0;
  } else if (s.step > 0 && s.elapsed_s > 0) {
    const double rate = static_cast<double>(s.step) / s.elapsed_s;
    s.eta_s = static_cast<double>(std::max<int64_t>(0, total_steps_ - s.step)) / rate;
  }
  return s;
}

}  // namespace ecps
