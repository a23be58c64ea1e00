#include "coordinator/job_progress.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "proto/ecps.pb.h"

namespace ecps {

double WindowRate(const std::deque<CounterPoint>& points, absl::Time known_until,
                  absl::Duration window) {
  if (points.size() < 2) return 0;
  const CounterPoint& first = points.front();
  const CounterPoint& last = points.back();
  // Until the next step is acknowledged the counter stands still for about a step's time
  // in any case; only a pause longer than that is a stall.
  absl::Time end = last.at;
  if (last.step > first.step) {
    const absl::Duration step_time = (last.at - first.at) / (last.step - first.step);
    const absl::Duration still = known_until - last.at;
    if (still > step_time) end += still - step_time;
  }
  const CounterPoint* start = &first;
  for (const CounterPoint& p : points) {
    if (p.at > end - window) break;
    start = &p;
  }
  const double seconds = absl::ToDoubleSeconds(end - start->at);
  if (start == &last || seconds <= 0) return 0;
  return static_cast<double>(last.samples - start->samples) / seconds;
}

void CounterWindow::Add(absl::Time at, absl::Time received, int64_t step, int64_t samples) {
  if (!points_.empty() && (samples < points_.back().samples || step < points_.back().step)) {
    points_.clear();
  }
  known_until_ = received;
  if (!points_.empty() && samples == points_.back().samples) {
    points_.back().at = std::max(points_.back().at, at);
    return;
  }
  // A report's date is the receipt minus the age the worker measured, so transit jitter
  // could put it before the previous one; time does not run backwards for one counter.
  if (!points_.empty()) at = std::max(at, points_.back().at);
  points_.push_back(CounterPoint{at, step, samples});
  // WindowRate never starts before the newest point a window before the newest: older
  // ones are of no use.
  while (points_.size() > 2 && points_[1].at <= points_.back().at - window_) {
    points_.pop_front();
  }
}

JobProgress::JobProgress(int num_workers, int64_t total_steps, absl::Duration rate_window)
    : total_steps_(total_steps), workers_(std::max(0, num_workers), Latest(rate_window)) {}

void JobProgress::Report(int worker, const v1::WorkerProgress& progress, absl::Time received) {
  if (worker < 0 || worker >= static_cast<int>(workers_.size())) return;
  Latest& w = workers_[worker];
  w.reported = true;
  w.step = progress.step();
  w.samples = progress.samples();
  // A worker from before samples_age_s sends 0: its count is dated on receipt.
  const double age = progress.samples_age_s();
  const absl::Duration ago =
      std::isfinite(age) && age > 0 ? absl::Seconds(age) : absl::ZeroDuration();
  w.counter.Add(received - ago, received, progress.step(), progress.samples());
  w.loss = progress.loss();
  w.done = progress.done();
  w.data_epoch = progress.data_epoch();
  w.data_epochs = progress.data_epochs();
  w.abft_detections = progress.abft_detections();
  if (progress.eval_auc() > 0) {
    w.eval_auc = progress.eval_auc();
    w.eval_logloss = progress.eval_logloss();
    w.eval_step = progress.eval_step();
  }
}

void JobProgress::Stopped(int worker) {
  if (worker < 0 || worker >= static_cast<int>(workers_.size())) return;
  workers_[worker].counter.Reset();
  // Its replacement counts from 0.
  dead_abft_detections_ += workers_[worker].abft_detections;
  workers_[worker].abft_detections = 0;
}

double JobProgress::WorkerRate(int worker) const {
  if (worker < 0 || worker >= static_cast<int>(workers_.size())) return 0;
  const Latest& w = workers_[worker];
  return w.done ? 0 : w.counter.Rate();
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
  s.abft_detections = dead_abft_detections_;
  int64_t min_step = workers_.empty() ? 0 : std::numeric_limits<int64_t>::max();
  double loss_sum = 0;
  int loss_count = 0;
  for (const Latest& w : workers_) {
    min_step = std::min(min_step, w.reported ? w.step : int64_t{0});
    s.samples += w.samples;
    if (!w.done) s.samples_per_s += w.counter.Rate();
    if (w.reported && w.step > 0) {
      loss_sum += w.loss;
      ++loss_count;
    }
    if (w.data_epoch > 0) {
      s.data_epoch = s.data_epoch == 0 ? w.data_epoch : std::min(s.data_epoch, w.data_epoch);
    }
    s.data_epochs = std::max(s.data_epochs, w.data_epochs);
    s.abft_detections += w.abft_detections;
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
