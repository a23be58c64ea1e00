// ProgressManager: the job's progress (steps, samples, loss, eval, rate, ETA) as the workers'
// heartbeats report it, behind a lock of its own.
//
// It wraps JobProgress (job_progress.h) with the coordinator's clock and the job phase's
// effect on it: leaving STARTING starts the job's clock, a final phase stops it.
// Thread-safe. A leaf of the coordinator's lock order (coordinator_service.h): it calls no
// other manager, so any may call it while holding its own lock.
#ifndef ECPS_COORDINATOR_PROGRESS_MANAGER_H_
#define ECPS_COORDINATOR_PROGRESS_MANAGER_H_

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "runtime/clock.h"
#include "coordinator/job_progress.h"
#include "proto/ecps.pb.h"

namespace ecps {

class ProgressManager {
 public:
  // `clock` must outlive the manager.
  ProgressManager(const Clock* clock, int num_workers, int64_t total_steps);
  ProgressManager(const ProgressManager&) = delete;
  ProgressManager& operator=(const ProgressManager&) = delete;

  // Worker `worker`'s latest report, received now. Ignores an id out of range.
  void Report(int worker, const v1::WorkerProgress& progress) ABSL_LOCKS_EXCLUDED(mu_);
  // Worker `worker` was declared dead: it trains no more samples per second.
  void Stopped(int worker) ABSL_LOCKS_EXCLUDED(mu_);
  // The job phase went from `from` to `to` (from != to): leaving STARTING for anything but
  // FAILED, or entering RUNNING, starts the job's clock; FINISHED or FAILED stops it.
  void PhaseChanged(v1::JobPhase from, v1::JobPhase to) ABSL_LOCKS_EXCLUDED(mu_);
  // A takeover of a job past STARTING: the job's clock runs from now.
  void MarkRunning() ABSL_LOCKS_EXCLUDED(mu_);

  ProgressSummary Summarize() const ABSL_LOCKS_EXCLUDED(mu_);
  // The summary into `response` (step, samples, rate, loss, eval, elapsed, ETA), and each
  // worker node already in response->nodes() gets its share of the job's rate (a worker's
  // own samples_per_s is over its last heartbeat interval, which a few steps swing).
  void FillStatus(v1::StatusResponse* response) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const Clock* const clock_;
  mutable absl::Mutex mu_;
  JobProgress progress_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ecps

#endif  // ECPS_COORDINATOR_PROGRESS_MANAGER_H_
