// Ctrl-C for `ecps run`. SIGINT, SIGTERM and SIGHUP only raise a flag (a signal handler can do
// no more); a thread of the launcher's own acts on it, so that a stop takes the same few
// seconds whatever the main thread is doing at that moment (starting a thousand roles one
// after another, waiting on an RPC to a loaded coordinator, sleeping between two polls). It
// stops every child at once (ProcessGroup::StopAll: SIGTERM to all, SIGKILL to what is left
// after the grace), says what it waits for, and ends the process with exit code 130. A second
// signal cuts the grace short: SIGKILL to every child at once.
#ifndef ECPS_CLI_INTERRUPT_H_
#define ECPS_CLI_INTERRUPT_H_

#include <atomic>
#include <chrono>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "cli/launch_backend.h"
#include "cli/progress_line.h"

namespace ecps {

// The exit code of a launcher that a signal stopped.
inline constexpr int kExitInterrupted = 130;

class InterruptStop {
 public:
  // SIGTERM to SIGKILL, and SIGKILL to giving up on reaping: a stop ends within their sum.
  static constexpr std::chrono::milliseconds kGrace{3000};
  static constexpr std::chrono::milliseconds kKillWait{1000};

  // Installs the handlers of SIGINT, SIGTERM and SIGHUP (process-wide; again is harmless).
  static void InstallHandlers();
  // What the handlers raise: the last signal's number, 0 until one arrives. The main thread's
  // waits give up when it is set.
  static const std::atomic<int>* Flag();

  // Watches the flag from a thread of its own. `children` and `printer` (thread-safe) must
  // outlive this object.
  InterruptStop(LaunchBackend* children, ProgressPrinter* printer);
  // Stops watching; when a stop is under way, it waits for it (and the process ends there).
  ~InterruptStop();
  InterruptStop(const InterruptStop&) = delete;
  InterruptStop& operator=(const InterruptStop&) = delete;

  bool interrupted() const { return Flag()->load() != 0; }
  // For the main thread once it saw interrupted(): waits while the stop runs; it ends the
  // process with kExitInterrupted.
  [[noreturn]] void AwaitExit();

 private:
  void Watch();
  [[noreturn]] void StopAndExit();

  LaunchBackend* const children_;
  ProgressPrinter* const printer_;
  absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  std::thread watcher_;
};

}  // namespace ecps

#endif  // ECPS_CLI_INTERRUPT_H_
