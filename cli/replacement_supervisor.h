// The replacement supervisor of `ecps run`: a dead server slot with no standby spare left,
// or a dead worker, gets a new process with that id (it registers as the replacement). A
// server is replaced only in a mode that can restore it (erasure_code, replication from
// parity; checkpoint by rolling the job back). A slot whose replacements keep dying before
// it recovers (kMaxRestarts in a row) fails the job: the same spec on the same machine would
// only fail again. Not thread-safe.
#ifndef ECPS_CLI_REPLACEMENT_SUPERVISOR_H_
#define ECPS_CLI_REPLACEMENT_SUPERVISOR_H_

#include <map>
#include <string>
#include <utility>

#include "cli/launch_backend.h"
#include "cli/progress_line.h"
#include "cli/role_spawner.h"
#include "proto/ecps.pb.h"
#include "runtime/spec.h"

namespace ecps {

class ReplacementSupervisor {
 public:
  static constexpr int kMaxRestarts = 3;

  // `spawner` and `backend` must outlive the supervisor.
  ReplacementSupervisor(FaultToleranceMode mode, RoleSpawner* spawner, LaunchBackend* backend);

  // Starts the replacements `status` calls for (one at a time per slot), each an event.
  // Returns why the job must fail (a slot out of restarts, with its last log lines), or
  // an empty string.
  std::string Supervise(const v1::StatusResponse& status, EventLog* events);

 private:
  using Slot = std::pair<int, int>;  // (role, id)

  const FaultToleranceMode mode_;
  RoleSpawner* const spawner_;
  LaunchBackend* const backend_;
  std::map<Slot, int> replacements_;  // the slot's latest replacement, a child index
  std::map<Slot, int> restarts_;      // replacements started since the slot last recovered
};

}  // namespace ecps

#endif  // ECPS_CLI_REPLACEMENT_SUPERVISOR_H_
