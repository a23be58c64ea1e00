#include "coordinator/coordinator_main.h"

#include <signal.h>
#include <time.h>

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator/coordinator_process.h"
#include "spdlog/spdlog.h"

namespace ecps {
namespace {

// Blocks SIGINT/SIGTERM in this thread for its lifetime and lets the owner wait for them.
class TerminationSignals {
 public:
  TerminationSignals() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set_, &old_);
  }
  ~TerminationSignals() {
    // Consume whatever is pending so that unblocking does not deliver it.
    timespec zero{0, 0};
    while (sigtimedwait(&set_, nullptr, &zero) > 0) {
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  // Waits up to `timeout` for SIGINT/SIGTERM; returns the signal, or 0 on timeout.
  int Wait(absl::Duration timeout) {
    const timespec ts = absl::ToTimespec(timeout);
    const int sig = sigtimedwait(&set_, nullptr, &ts);
    return sig > 0 ? sig : 0;
  }

 private:
  sigset_t set_;
  sigset_t old_;
};

}  // namespace

int RunCoordinator(const CoordinatorOptions& options) {
  TerminationSignals signals;  // before any gRPC thread starts, so they inherit the mask
  absl::StatusOr<std::unique_ptr<CoordinatorProcess>> process =
      CoordinatorProcess::Create(options);
  if (!process.ok()) {
    spdlog::error("coordinator: {}", process.status().ToString());
    return absl::IsDataLoss(process.status()) ? kExitStateDamaged : 1;
  }
  if (absl::Status started = (*process)->Start(); !started.ok()) {
    spdlog::error("coordinator: {}", started.ToString());
    return 1;
  }
  (*process)->Serve([&signals](absl::Duration period) { return signals.Wait(period); });
  return (*process)->Stop();
}

}  // namespace ecps
