#include "coordinator/coordinator_loop.h"

namespace ecps {

CoordinatorLoop::CoordinatorLoop(CoordinatorService* service, absl::Duration tick)
    : service_(service), tick_(tick) {
  detection_ = std::thread([this] {
    // A round that starts well after its tick: this process was not scheduled (a loaded
    // machine, a stopped VM), so nobody's heartbeat could be handled either.
    absl::Time due = absl::Now() + tick_;
    Every([this, &due] {
      const absl::Time now = absl::Now();
      if (now - due > kScheduleSlack) service_->Stalled(now - due);
      service_->Tick();
      due = absl::Now() + tick_;
    });
  });
  operations_ = std::thread([this] {
    Every([this] {
      service_->RunPendingRollback();
      service_->RunPeriodicCheckpoint();
      service_->RunPendingCheckpoint();
      service_->RunPendingScrub();
    });
  });
}

CoordinatorLoop::~CoordinatorLoop() { Stop(); }

void CoordinatorLoop::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (detection_.joinable()) detection_.join();
  if (operations_.joinable()) operations_.join();
}

void CoordinatorLoop::Every(const std::function<void()>& round) {
  while (!stop_.WaitForNotificationWithTimeout(tick_)) round();
}

}  // namespace ecps
