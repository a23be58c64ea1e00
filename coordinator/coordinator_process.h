// The coordinator process's life in steps, apart from its signals: create the service with
// its cluster operations (scrub, checkpoint save, prune, reload, what a server's death
// does), start serving and publish the address (port and address files), serve until the
// job ended and the linger passed, then stop and leave the final status. RunCoordinator
// (coordinator_main.h) strings them together; a test drives each with a real gRPC server on
// a free port.
#ifndef ECPS_COORDINATOR_COORDINATOR_PROCESS_H_
#define ECPS_COORDINATOR_COORDINATOR_PROCESS_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "runtime/clock.h"
#include "coordinator/coordinator_loop.h"
#include "coordinator/coordinator_main.h"
#include "coordinator/coordinator_service.h"
#include "coordinator/grpc_coordinator.h"
#include "coordinator/state_store.h"
#include "proto/ecps.pb.h"
#include "runtime/metrics.h"
#include "runtime/rpc.h"

namespace ecps {

// How long the job waits for every server to be ACTIVE and every worker registered:
// options.startup_timeout_ms, or cluster.connect_timeout_s when it is negative (roles start
// in any order and wait that long for the coordinator).
absl::Duration StartupTimeout(const CoordinatorOptions& options);

// The failure-detection period: options.tick_ms, or when that is not positive a tenth of
// the heartbeat timeout, between 1 and 100 ms.
absl::Duration TickPeriod(const CoordinatorOptions& options);

// The gRPC server's polling threads: one per expected node (servers, spares, workers) keeps
// every node's RPCs from queueing, between 4 and 256. Above 256 a thread per node buys nothing
// (a heartbeat takes tens of microseconds) and starting them took 4.8 s at 11,000 nodes, most of
// a takeover (bench/coordinator_scale_bench.cc); a watch stream that holds a thread has another
// poller started in its place, as before.
int ServingThreads(const JobSpec& spec);

// The process's exit code for a job that stopped in `phase`: 0 finished, kExitDataLost
// failed for data loss, 1 failed otherwise or not ended.
int CoordinatorExitCode(v1::JobPhase phase, bool data_lost);

// What Serve's `wait_for_signal` returns when the coordinator lost its lead.
inline constexpr int kLeadLost = -1;

// Not thread-safe: one thread calls the steps in order (Create, Start, Serve, Stop).
class CoordinatorProcess {
 public:
  // The service of options.spec with every cluster operation its mode needs, and its durable
  // state: `store` when given (etcd's, once this coordinator leads), else the state log in
  // options.state_dir when set. A store holding state makes it take the job over. The error is
  // a bad spec (the service's or the checkpoint layout's), a store that cannot be read or
  // whose state does not fit, or a first save that failed.
  static absl::StatusOr<std::unique_ptr<CoordinatorProcess>> Create(
      const CoordinatorOptions& options, std::unique_ptr<StateStore> store = nullptr);
  ~CoordinatorProcess();  // stops serving, as Stop does, without writing the final status

  // Starts serving on options.listen_host:options.port and writes the port and address
  // files (when set). On an error (the port taken, the address or a file unwritable) stops
  // serving and returns it.
  absl::Status Start();

  // Runs failure detection and the long cluster operations on their own threads, and
  // returns once the job ended and options.linger_ms passed (-1: never), or when
  // `wait_for_signal(period)` (it waits up to `period`) returns a signal number, or
  // kLeadLost: this coordinator no longer leads (etcd) and must stop acting at once.
  void Serve(const std::function<int(absl::Duration)>& wait_for_signal);

  // Stops serving (a save in progress finishes first; open map streams end), writes the
  // final status file (when set) and returns the exit code (CoordinatorExitCode).
  int Stop();

  CoordinatorService* service() { return service_.get(); }
  int port() const { return server_.port; }
  // What the roles dial (host:port); empty before Start.
  const std::string& advertised() const { return advertised_; }

 private:
  CoordinatorProcess(const CoordinatorOptions& options, std::string token);
  absl::Status WireClusterOperations();
  // Loads `store` (nothing without one), takes the job over when it holds state, and has the
  // service save into it.
  absl::Status UseStateStore(std::unique_ptr<StateStore> store);
  absl::Status WriteFinalStatus();
  // Stops the loop, the service and the gRPC server; idempotent.
  void Shutdown();

  const CoordinatorOptions options_;
  const std::string token_;  // what it presents: the coordinator's role token
  RealClock clock_;
  // Before service_, whose state saver writes into it (destroyed after it).
  std::unique_ptr<StateStore> state_store_;
  std::unique_ptr<CoordinatorService> service_;
  std::unique_ptr<GrpcCoordinator> glue_;
  GrpcServer server_;
  std::string advertised_;
  std::unique_ptr<CoordinatorLoop> loop_;
  // /metrics (null: monitoring.metrics_port -1, or it could not listen). Reads service_.
  std::unique_ptr<MetricsEndpoint> metrics_;
};

}  // namespace ecps

#endif  // ECPS_COORDINATOR_COORDINATOR_PROCESS_H_
