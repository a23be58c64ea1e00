#include "cli/interrupt.h"

#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace ecps {
namespace {

// A signal handler can reach nothing else: the two words it writes, read by the watcher.
std::atomic<int> g_signal{0};
std::atomic<int> g_signals{0};

void OnSignal(int sig) {
  g_signal.store(sig);
  g_signals.fetch_add(1);
}

const char* SignalName(int sig) {
  switch (sig) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGHUP:
      return "SIGHUP";
    default:
      return "a signal";
  }
}

}  // namespace

void InterruptStop::InstallHandlers() {
  struct sigaction sa = {};
  sa.sa_handler = OnSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
}

const std::atomic<int>* InterruptStop::Flag() { return &g_signal; }

InterruptStop::InterruptStop(LaunchBackend* children, ProgressPrinter* printer)
    : children_(children), printer_(printer), watcher_([this] { Watch(); }) {}

InterruptStop::~InterruptStop() {
  {
    absl::MutexLock lock(&mu_);
    done_ = true;
  }
  watcher_.join();
}

void InterruptStop::Watch() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&done_), absl::Milliseconds(50));
      if (done_) return;
    }
    if (interrupted()) StopAndExit();
  }
}

void InterruptStop::StopAndExit() {
  const int sig = g_signal.load();
  printer_->Event(absl::StrCat("ecps: ", SignalName(sig), ": stopping ", children_->running(),
                               " processes: SIGTERM now, SIGKILL to what is left in ",
                               std::chrono::duration_cast<std::chrono::seconds>(kGrace).count(),
                               " s (a second Ctrl-C: SIGKILL at once)"));
  StopPlan plan;
  plan.grace = kGrace;
  plan.kill_wait = kKillWait;
  plan.report = [this](const std::string& line) { printer_->Event("ecps: " + line); };
  plan.kill_now = [] { return g_signals.load() >= 2; };
  children_->StopAll(plan);
  printer_->Finish();
  std::fflush(stdout);
  std::fflush(stderr);
  // The main thread may be anywhere (in an RPC, in a sleep of an hour): nothing of it is
  // waited for, and nothing it holds needs cleaning up once every child is gone.
  std::_Exit(kExitInterrupted);
}

void InterruptStop::AwaitExit() {
  // The watcher sees the flag within one poll and ends the process; this thread only waits
  // (and would end it, were the watcher ever to miss it).
  std::this_thread::sleep_for(kGrace + kKillWait + std::chrono::seconds(1));
  std::_Exit(kExitInterrupted);
}

}  // namespace ecps
