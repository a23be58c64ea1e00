// Job progress: aggregates the workers' progress reports into the job-level numbers that
// Status shows.
//
//   step           min over all workers of completed steps (a worker that has not
//                  reported yet counts as 0)
//   samples        sum over workers
//   samples_per_s  sum of the latest rates of workers that are not done
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
#include <optional>
#include <vector>

#include "absl/time/time.h"

namespace ecps {
namespace v1 {
class WorkerProgress;
}

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
};

class JobProgress {
 public:
  JobProgress(int num_workers, int64_t total_steps);

  // Records worker `worker`'s latest report. Ignores an id outside [0, num_workers).
  void Report(int worker, const v1::WorkerProgress& progress);

  // The job entered RUNNING / FINISHED or FAILED at `t`. Only the first call of each counts.
  void MarkRunning(absl::Time t);
  void MarkEnded(absl::Time t);
  std::optional<absl::Time> running_since() const { return running_since_; }

  ProgressSummary Summarize(absl::Time now) const;

 private:
  struct Latest {
    bool reported = false;
    int64_t step = 0;
    int64_t samples = 0;
    double samples_per_s = 0;
    double loss = 0;
    double eval_auc = 0;
    double eval_logloss = 0;
    int64_t eval_step = 0;
    bool done = false;
  };

  const int64_t total_steps_;
  std::vector<Latest> workers_;
  std::optional<absl::Time> running_since_;
  std::optional<absl::Time> ended_at_;
};

}  // namespace ecps

#endif  // ECPS_COORDINATOR_JOB_PROGRESS_H_
