// CoordinatorLoop: the coordinator's periodic work, on two threads of its own.
//
// Failure detection (CoordinatorService::Tick: heartbeat timeouts, confirmed deaths, the
// recovery they start, the startup timeout) runs every `tick` on one thread. The cluster
// operations that can take seconds or minutes -- a rollback's reload, periodic and final
// checkpoints (every server frozen while files are written), the final scrub -- run every
// `tick` on the other (RunPendingRollback, RunPeriodicCheckpoint, RunPendingCheckpoint,
// RunPendingScrub, in that order). So a server that dies while a checkpoint is being saved is
// declared dead, and its recovery starts, on time rather than after the save. A detection
// round that starts late (the process was not scheduled) is time nobody could be heard in:
// the nodes' deadlines move on by it rather than all of them expiring at once.
//
// CoordinatorService is thread-safe and its long operations run without its lock, so the two
// threads (and the RPC handlers) only ever wait for each other for short critical sections.
#ifndef ECPS_COORDINATOR_COORDINATOR_LOOP_H_
#define ECPS_COORDINATOR_COORDINATOR_LOOP_H_

#include <functional>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "coordinator/coordinator_service.h"

namespace ecps {

// A detection round that starts later than this after its tick tells the service that the
// coordinator was stalled (CoordinatorService::Stalled).
inline constexpr absl::Duration kScheduleSlack = absl::Milliseconds(50);

class CoordinatorLoop {
 public:
  // Starts both threads; each runs its first round one `tick` from now. `service` must outlive
  // the loop; `tick` must be positive.
  CoordinatorLoop(CoordinatorService* service, absl::Duration tick);

  CoordinatorLoop(const CoordinatorLoop&) = delete;
  CoordinatorLoop& operator=(const CoordinatorLoop&) = delete;
  ~CoordinatorLoop();  // Stop()

  // Stops both threads and waits for them. An operation in progress (a checkpoint being
  // written) is not interrupted: Stop returns once it finished. Idempotent; not thread-safe
  // (the owner calls it).
  void Stop();

 private:
  // Runs `round` every `tick_` (a tick after the previous one ended) until Stop.
  void Every(const std::function<void()>& round);

  CoordinatorService* const service_;
  const absl::Duration tick_;
  absl::Notification stop_;
  std::thread detection_;   // Tick
  std::thread operations_;  // rollback, checkpoints, scrub
};

}  // namespace ecps

#endif  // ECPS_COORDINATOR_COORDINATOR_LOOP_H_
