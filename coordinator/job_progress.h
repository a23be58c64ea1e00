// Job progress: aggregates the workers' progress reports into the job-level numbers that
// Status shows.
//
//   step           min over all workers of completed steps (a worker that has not
//                  reported yet counts as 0)
//   samples        sum over workers
//   samples_per_s  sum over workers that are not done of the rate their counters show over
//                  the last rate_window of their steps (WindowRate): samples are dated
//                  when the step that trained them finished (a report's receipt minus its
//                  samples_age_s), not when a heartbeat or a Status poll happened to come,
//                  so a steady worker shows a steady rate
//   loss           mean of the latest losses of workers that completed at least one step
//   eval_*         the evaluation with the highest eval_step reported by any worker
//                  (worker 0 evaluates); eval_auc <= 0 in a report means "none yet"
//                  (proto3 leaves an unset AUC at 0), and -1 in the summary means none
//   elapsed_s      since MarkRunning, frozen at MarkEnded; 0 before running
//   eta_s          remaining steps / average step rate since running; 0 once ended;
//                  -1 while unknown (no step completed yet)
//
// Not thread-safe: the owner serialises calls. Times are passed in by the owner (who holds
// the injected clock).
#ifndef ECPS_COORDINATOR_JOB_PROGRESS_H_
#define ECPS_COORDINATOR_JOB_PROGRESS_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "absl/time/time.h"

namespace ecps {
namespace v1 {
class WorkerProgress;
}

// A worker's training counter at one time on the coordinator's clock: `samples` had been
// trained after `step` steps when the step that completed them finished, at `at`.
struct CounterPoint {
  absl::Time at;
  int64_t step = 0;
  int64_t samples = 0;
};

// The samples/s that one run of a worker's counter shows over the `window` before its end
// (`points` oldest first, samples never decreasing; `known_until`: the newest report's
// time, when the counter still stood at the newest point). The rate is taken between two
// points, the newest and the newest one at least `window` before the end (else the oldest),
// so both ends are step boundaries and it counts whole steps over the time they took: no
// aliasing however the reports fall. The end is the newest point, unless the counter has
// stood still since then for longer than a step takes (the mean of `points`): then the
// worker has stalled, the end moves on by the excess, and the rate falls to 0 once the
// stall outlasts the window. 0 with fewer than two points.
double WindowRate(const std::deque<CounterPoint>& points, absl::Time known_until,
                  absl::Duration window);

// One worker's counter over the last window: what WindowRate needs, pruned as it grows.
class CounterWindow {
 public:
  explicit CounterWindow(absl::Duration window) : window_(window) {}

  // A report received at `received`: `samples` after `step` steps, reached at `at`. A count
  // lower than the last (a rollback's rewind) or a step lower starts a new run, so a
  // counter that jumps back never shows as a negative or a huge rate; the same count again
  // only says the counter still stood there (its point takes the later date: a worker that
  // starts training dates its starting count anew, so start-up is not taken for a slow
  // step).
  void Add(absl::Time at, absl::Time received, int64_t step, int64_t samples);
  // The worker died: its counter's next values (a replacement's) start a new run.
  void Reset() { points_.clear(); }
  double Rate() const { return WindowRate(points_, known_until_, window_); }

 private:
  absl::Duration window_;
  std::deque<CounterPoint> points_;
  absl::Time known_until_ = absl::InfinitePast();
};

struct ProgressSummary {
  int64_t step = 0;
  int64_t total_steps = 0;
  int64_t samples = 0;
  double samples_per_s = 0;
  double loss = 0;
  double eval_auc = -1;
  double eval_logloss = -1;
  int64_t eval_step = -1;
  double elapsed_s = 0;
  double eta_s = -1;
  int data_epoch = 0;   // the slowest worker's pass over the data, 1-based (0: none yet)
  int data_epochs = 0;  // data.epochs, as the workers report it
  int64_t abft_detections = 0;  // steps computed again, every instance of every worker
};

// How far back samples_per_s looks: long enough to hold several reports (heartbeats), short
// enough that a change of rate shows within it.
inline constexpr absl::Duration kRateWindow = absl::Seconds(2);

class JobProgress {
 public:
  JobProgress(int num_workers, int64_t total_steps, absl::Duration rate_window = kRateWindow);

  // Records worker `worker`'s latest report, received at `received`. Ignores an id outside
  // [0, num_workers).
  void Report(int worker, const v1::WorkerProgress& progress, absl::Time received);
  // Worker `worker` was declared dead: it trains nothing from now on, and its replacement's
  // counter starts a run of its own.
  void Stopped(int worker);
  // The samples/s of worker `worker` (0 when done, stopped or unknown), as in Summarize.
  double WorkerRate(int worker) const;

  // The job entered RUNNING / FINISHED or FAILED at `t`. Only the first call of each counts.
  void MarkRunning(absl::Time t);
  void MarkEnded(absl::Time t);
  std::optional<absl::Time> running_since() const { return running_since_; }

  ProgressSummary Summarize(absl::Time now) const;

 private:
  struct Latest {
    explicit Latest(absl::Duration window) : counter(window) {}
    bool reported = false;
    int64_t step = 0;
    int64_t samples = 0;
    CounterWindow counter;
    double loss = 0;
    double eval_auc = 0;
    double eval_logloss = 0;
    int64_t eval_step = 0;
    bool done = false;
    int data_epoch = 0;
    int data_epochs = 0;
    int64_t abft_detections = 0;  // this instance's
  };

  const int64_t total_steps_;
  std::vector<Latest> workers_;
  int64_t dead_abft_detections_ = 0;  // of the instances Stopped
  std::optional<absl::Time> running_since_;
  std::optional<absl::Time> ended_at_;
};

}  // namespace ecps

#endif  // ECPS_COORDINATOR_JOB_PROGRESS_H_
