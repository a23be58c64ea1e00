// When the coordinator saves checkpoints on its own: periodically in fault_tolerance.mode
// checkpoint (every checkpoint.interval_steps steps or interval_seconds seconds, the first
// one at once so that a failure always has one to roll back to), and once at the end of the
// job with checkpoint.save_final. Pure bookkeeping on the times and steps it is given; the
// coordinator service decides whether a save may run now (servers active, no rollback) and
// runs it. Not thread-safe: the owner serialises every call.
#ifndef ECPS_COORDINATOR_CHECKPOINT_SCHEDULE_H_
#define ECPS_COORDINATOR_CHECKPOINT_SCHEDULE_H_

#include <cstdint>
#include <optional>

#include "absl/time/time.h"

namespace ecps {

class CheckpointSchedule {
 public:
  // `periodic`: the mode saves periodically (checkpoint) and an interval is set (0: none of
  // that kind). `save_final`: checkpoint.save_final.
  CheckpointSchedule(bool periodic, int64_t interval_steps, double interval_seconds,
                     bool save_final);

  bool periodic() const { return periodic_; }
  // Whether a periodic save is due at the job's `step` at `now`: interval_steps steps since
  // the last one, or interval_seconds passed and the job moved on. The first call finds one
  // due at once.
  bool PeriodicDue(int64_t step, absl::Time now);
  // A periodic save was tried at `step` (the caller passes the saved report's step when it is
  // later) and ended at `now`, whether it committed or not (a failed one is not retried before the next interval).
  void PeriodicTried(int64_t step, absl::Time now);

  // The last periodic save tried (its step, when it ended; none before the first), and
  // whether the final save ran: what a takeover restores (Restore).
  int64_t last_step() const { return last_step_; }
  std::optional<absl::Time> last_time() const { return last_time_; }
  bool final_done() const { return final_done_; }
  void Restore(int64_t last_step, std::optional<absl::Time> last_time, bool final_done) {
    last_step_ = last_step;
    last_time_ = last_time;
    final_done_ = final_done;
  }

  // A final checkpoint is configured and not saved yet.
  bool final_wanted() const { return save_final_ && !final_done_; }
  bool final_pending() const { return final_pending_; }
  // Every worker is done: the final save may run (RunPendingCheckpoint).
  void RequestFinal() { final_pending_ = final_wanted(); }
  // The final save ran (committed, kept an existing one, or failed the job).
  void FinalDone() {
    final_pending_ = false;
    final_done_ = true;
  }

 private:
  const bool periodic_;
  const int64_t interval_steps_;
  const double interval_seconds_;
  const bool save_final_;
  int64_t last_step_ = 0;
  std::optional<absl::Time> last_time_;
  bool final_pending_ = false;
  bool final_done_ = false;
};

}  // namespace ecps

#endif  // ECPS_COORDINATOR_CHECKPOINT_SCHEDULE_H_
