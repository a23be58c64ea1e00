// The child processes of `ecps run`: spawned with their output in log files, each in its own
// process group (Ctrl-C reaches only the launcher, which stops them all), and tied to the
// launcher with PR_SET_PDEATHSIG so that no child outlives it, even a launcher killed with
// SIGKILL. Thread-safe: the launcher's main thread starts and polls children while the thread
// that answers Ctrl-C stops them (cli/interrupt.h).
#ifndef ECPS_CLI_PROCESS_GROUP_H_
#define ECPS_CLI_PROCESS_GROUP_H_

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace ecps {

struct Child {
  std::string name;      // "server-1"
  pid_t pid = -1;
  std::string log_path;
  bool exited = false;
  int exit_status = 0;   // waitpid status once exited
  bool stopping = false;  // running when StopAll began: one of those it waits for
};

// How ProcessGroup::StopAll stops every child: SIGTERM to all of them at once, `grace` for
// them to exit, SIGKILL to the rest, then at most `kill_wait` for those to be reaped. So a
// stop takes at most grace + kill_wait (plus one poll), however many children there are.
struct StopPlan {
  std::chrono::milliseconds grace{3000};
  std::chrono::milliseconds kill_wait{1000};
  // While it waits, a line for `report` (when set) after `first_report` and every
  // `report_every`: what it waits for (StoppingLine), then what it killed, and how it ended.
  std::chrono::milliseconds first_report{0};
  std::chrono::milliseconds report_every{1000};
  std::function<void(const std::string&)> report;
  // Polled while it waits; true cuts the grace short (SIGKILL now: a second Ctrl-C).
  std::function<bool()> kill_now;
};

class ProcessGroup {
 public:
  ProcessGroup() = default;
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  // Starts argv[0] with `argv` and extra environment entries ("K=V"); stdout and stderr go
  // to `log_path`. Returns the child's index; CANCELLED once StopAll has begun.
  absl::StatusOr<int> Spawn(const std::string& name, const std::vector<std::string>& argv,
                            const std::vector<std::string>& env, const std::string& log_path);

  // Reaps children that have exited (non-blocking). Returns the indices newly exited; none
  // once StopAll has begun (the stop accounts for them).
  std::vector<int> Poll();
  // Sends `sig` to one child (if it is still running).
  void Signal(int index, int sig);
  // Stops every running child as `plan` says, and starts no more (Spawn is refused from
  // now on). Returns how many it could not reap within the plan (0 normally: each of those
  // got SIGKILL, and init reaps it once the launcher is gone). Another thread may call it
  // at the same time (a Ctrl-C during the launcher's own stop): each keeps to its plan.
  int StopAll(const StopPlan& plan);

  // A copy of child `index` as it is now.
  Child child(int index) const;
  int size() const;
  int running() const;

 private:
  // Marks the running children as stopping, sends each SIGTERM (and SIGCONT: a stopped
  // child acts on nothing until it continues) and refuses spawns from now on.
  void TerminateAll();
  // SIGKILL to every running child; returns a line naming them (StoppingLine's words).
  std::string KillAll();
  // Reaps what exited; returns how many children are still running.
  int Reap() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::vector<Child> children_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

// What a stop waits for, from the children it stops (Child::stopping) and those of them still
// running, counted by kind (the name up to its first '-': server, spare, worker; "the
// coordinator" when there is one): "waiting for 812 of 1024 servers, 1 of 1 worker and the
// coordinator to exit (SIGKILL in 3 s)". Pure.
std::string StoppingLine(const std::vector<Child>& children, int seconds_to_kill);

// A short description of a waitpid status: "exit 0", "signal 9 (Killed)".
std::string DescribeExit(int status);

// The last `lines` lines of a file (for error messages that point at a child's log).
std::string TailFile(const std::string& path, int lines);

// The running ecps binary's absolute path (what children and job steps run), or "ecps".
std::string SelfPath();

// `text` in single quotes, safe as one word for any POSIX shell.
std::string ShellQuote(const std::string& text);

}  // namespace ecps

#endif  // ECPS_CLI_PROCESS_GROUP_H_
