#include "coordinator/checkpoint_schedule.h"

namespace ecps {

CheckpointSchedule::CheckpointSchedule(bool periodic, int64_t interval_steps,
                                       double interval_seconds, bool save_final)
    : periodic_(periodic && (interval_steps > 0 || interval_seconds > 0)),
      interval_steps_(interval_steps),
      interval_seconds_(interval_seconds),
      save_final_(save_final) {}

bool CheckpointSchedule::PeriodicDue(int64_t step, absl::Time now) {
  if (!periodic_) return false;
  if (!last_time_) {
    // Pretend the last one was an interval ago, so the first one is due right away.
    last_time_ = now;
    last_step_ = step - interval_steps_;
    if (interval_steps_ == 0) {
      last_time_ = now - absl::Seconds(interval_seconds_);
      last_step_ = step - 1;
    }
  }
  const bool by_steps = interval_steps_ > 0 && step >= last_step_ + interval_steps_;
  const bool by_time = interval_seconds_ > 0 &&
                       now - *last_time_ >= absl::Seconds(interval_seconds_) &&
                       step > last_step_;
  return by_steps || by_time;
}

void CheckpointSchedule::PeriodicTried(int64_t step, absl::Time now) {
  // Set, not raised: after a rollback the job's step goes back, and the interval counts
  // from there.
  last_step_ = step;
  last_time_ = now;
}

}  // namespace ecps
