// The fault drills of a spec's `faults:` section, run by `ecps run`: when the job's step
// reaches a drill's at_step, the process that holds the logical id at that moment (it may
// be a promoted spare or a replacement) is killed (SIGKILL), or stopped (SIGSTOP) and
// continued after duration_s to show that the old instance finds itself fenced. On a
// backend that cannot signal roles, a kill goes through the coordinator (Kill RPC, as
// `ecps kill`). Not thread-safe.
#ifndef ECPS_CLI_DRILLS_H_
#define ECPS_CLI_DRILLS_H_

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "cli/launch_backend.h"
#include "cli/progress_line.h"
#include "cli/run_report.h"
#include "proto/ecps.pb.h"
#include "runtime/coordinator_client.h"
#include "runtime/spec.h"

namespace ecps {

class DrillRunner {
 public:
  // `backend` must outlive the runner.
  DrillRunner(std::vector<FaultSpec> faults, LaunchBackend* backend);

  // Runs each drill whose step `status` has reached and whose target is held now (one not
  // held is tried again at the next call); `t` is the launcher's time. Each drill runs once.
  void Run(const v1::StatusResponse& status, double t, CoordinatorClient* client,
           EventLog* events);

  // With standby coordinators: returns the child index of the one that leads (-1: none
  // known), which kill_coordinator kills; without, it kills every coordinator child.
  void set_active_coordinator(std::function<int()> active) {
    active_coordinator_ = std::move(active);
  }

  // SIGCONT for stopped drill victims whose time is up.
  void ContinueStopped(EventLog* events);

  // Whether `pid` is a process a drill killed or stopped (its exit is expected).
  bool IsVictim(pid_t pid) const { return victims_.count(pid) > 0; }
  // How long the coordinator `pid`, killed by a kill_coordinator drill, stays down (its
  // duration_s); 0 for any other process.
  double DownFor(pid_t pid) const {
    auto it = down_for_.find(pid);
    return it == down_for_.end() ? 0 : it->second;
  }
  const std::vector<DrillRecord>& records() const { return records_; }

 private:
  std::function<int()> active_coordinator_;
  struct Stopped {
    int index;  // the child
    std::chrono::steady_clock::time_point until;
    std::string label;
    int64_t pid;
  };

  // The index of the running child with `pid`, or -1 (a drill only signals our own children).
  int ChildWithPid(int64_t pid) const;

  const std::vector<FaultSpec> faults_;
  LaunchBackend* const backend_;
  std::vector<bool> done_;
  std::vector<DrillRecord> records_;
  std::vector<Stopped> stopped_;
  std::set<pid_t> victims_;
  std::map<pid_t, double> down_for_;  // killed coordinators: their drill's duration_s
};

}  // namespace ecps

#endif  // ECPS_CLI_DRILLS_H_
