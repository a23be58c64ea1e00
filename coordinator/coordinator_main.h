// The coordinator process: serves ecps.v1.Coordinator for one job until it ends.
#ifndef ECPS_COORDINATOR_COORDINATOR_MAIN_H_
#define ECPS_COORDINATOR_COORDINATOR_MAIN_H_

#include <string>

#include "runtime/spec.h"

namespace ecps {

// The exit code of the coordinator and of `ecps run` when the job failed because data was
// lost (more than r members of some stripes gone): distinct from any other failure (1).
inline constexpr int kExitDataLost = 4;
// The exit code of a coordinator that cannot take the job over because its saved state is
// damaged (a bad record or snapshot in --state-dir, the log naming the file and the record;
// with spec.coordinator.state_store etcd, a state there that is not a coordinator's):
// any other coordinator would find the same, so launchers do not start another.
inline constexpr int kExitStateDamaged = 5;
// The exit code of a coordinator that lost its lead in etcd (another took the job over, or
// it was cut off from etcd): it stopped acting; a launcher may start it again as a standby.
inline constexpr int kExitLeadLost = 6;

struct CoordinatorOptions {
  JobSpec spec;
  std::string listen_host = "127.0.0.1";
  std::string advertise;  // what the roles dial; empty: see AdvertiseHost (runtime/net.h)
  int port = 0;       // 0: a free port
  std::string token;  // empty: spec.job.token
  // When set, the bound port is written there (decimal and a newline), atomically (a
  // temporary file renamed into place), once the server is listening.
  std::string port_file;
  // When set, the advertised address (host:port and a newline), written the same way: what
  // a launcher on another host hands to the roles.
  std::string address_file;
  // When set, the job's last StatusResponse as JSON, written as the coordinator exits (for
  // deployments without `ecps run`, which writes report.json instead).
  std::string final_status_file;
  // Time to keep serving Status after the job ended; -1: until SIGTERM or SIGINT (under
  // Kubernetes, which starts again a coordinator that exits: one that takes over a job that
  // has ended serves its final status and nothing else).
  int linger_ms = 2000;
  int startup_timeout_ms = -1;      // every server ACTIVE and every worker registered by
                                    // then; -1: cluster.connect_timeout_s (roles start in
                                    // any order and wait that long for the coordinator)
  // When set, the coordinator's state log (state_log.h) lives there: a coordinator started
  // on a folder with state takes the job over from it (docs/recovery.md). Unused with
  // spec.coordinator.state_store etcd.
  std::string state_dir;
  int tick_ms = 0;                  // failure-detection period; 0: heartbeat timeout / 10,
                                    // at most 100 ms
};

// With spec.coordinator.state_store etcd, it first campaigns for the job's lead in etcd as a
// standby (not listening) until the active coordinator's lease lapses, then takes the job over
// from the state in etcd and serves while it leads; it returns kExitLeadLost once it does not.
//
// Runs the coordinator until the job finishes or fails, then keeps serving for linger_ms (-1:
// for good) so the launcher can read the final Status (or until SIGTERM/SIGINT), then shuts
// down cleanly
// (open WatchClusterMap streams end). Returns the process exit code: 0 when the job
// finished, kExitDataLost when it failed for data loss, 1 when it failed otherwise, could
// not start (bad spec, port in use) or was interrupted before it finished.
//
// SIGTERM and SIGINT are blocked in the calling thread (and so in the threads it starts) and
// consumed with sigtimedwait; call it from the main thread before starting other threads
// so that no other thread takes those signals. The previous signal mask is restored.
int RunCoordinator(const CoordinatorOptions& options);

}  // namespace ecps

#endif  // ECPS_COORDINATOR_COORDINATOR_MAIN_H_
