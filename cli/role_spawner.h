// How `ecps run` starts a job's roles: the command line of each role, where its log goes,
// and the waits between them (the coordinator listening, the servers registered), on a
// LaunchBackend. Not thread-safe.
#ifndef ECPS_CLI_ROLE_SPAWNER_H_
#define ECPS_CLI_ROLE_SPAWNER_H_

#include <atomic>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cli/launch_backend.h"
#include "proto/ecps.pb.h"
#include "runtime/spec.h"

namespace ecps {

struct RoleSetup {
  std::string self;        // the ecps binary the roles run
  std::string spec_file;   // the resolved spec every role reads
  std::string out_dir;     // the job's folder: logs/NAME.log, coordinator.address
  std::string token;       // the job secret; each role gets its credential (ECPS_TOKEN)
  std::string bind_host;   // what every role binds
};

class RoleSpawner {
 public:
  // `backend` and `interrupted` (non-zero: a signal arrived; every wait gives up) must
  // outlive the spawner.
  RoleSpawner(const JobSpec& spec, RoleSetup setup, LaunchBackend* backend,
              const std::atomic<int>* interrupted);

  // Starts the coordinator and waits until it writes the address it advertises (30 s, or
  // 120 s for a backend whose steps may wait for a node). INTERNAL with the end of its log
  // when it exits first, DEADLINE_EXCEEDED, or CANCELLED on a signal.
  // It keeps its state in DIR/coordinator-state, emptied first (an earlier run's state
  // there is not this job's), or with coordinator.state_store etcd in etcd, where the job's
  // keys are deleted first (FAILED_PRECONDITION when etcd does not answer). With
  // coordinator.replicas > 1 it starts them all, each on its own port (cluster.coordinator_port
  // + i, or free ports), and waits for the one that leads. Returns what the roles dial: the
  // address, or every replica's address comma-separated.
  absl::StatusOr<std::string> StartCoordinator();
  // Starts a new coordinator after the last one died, on the same state folder: it takes the
  // job over (docs/recovery.md). It may listen elsewhere (another port, under Slurm another
  // node): address() becomes its address, and the roles, which all get the address file
  // (--coordinator-file), find it there. Errors as StartCoordinator's.
  absl::Status RestartCoordinator();
  // With replicas: starts a new coordinator on the port of coordinator child `child`, which
  // died or lost its lead, as a standby (a surviving standby takes the job over meanwhile).
  absl::Status RestartStandby(int child);
  // The child index of the coordinator that leads now (the one whose port is in
  // DIR/coordinator.port), or -1 when none is known.
  int ActiveCoordinatorChild() const;
  int replicas() const { return spec_.coordinator.replicas; }

  // Starts the servers, then (once each holds its slot) the spares, then the workers. A
  // spare started earlier would take a slot still free. CANCELLED on a signal: no role
  // starts after it.
  absl::Status StartServersAndWorkers();

  // Starts one more instance of server or worker `id` (a replacement) as child `name`.
  // Returns its child index.
  absl::StatusOr<int> SpawnReplacement(v1::Role role, int id, const std::string& name);

  // DIR/logs/NAME.log.
  std::string LogPath(const std::string& name) const;
  // DIR/coordinator.address: the address the coordinator advertises, written once it listens
  // (with standbys: by each one as it takes the lead).
  std::string AddressFile() const;
  const std::string& address() const { return address_; }

 private:
  // A server's command line; id -1 is a spare. It binds what the coordinator binds.
  std::vector<std::string> ServerArgv(int id) const;
  std::vector<std::string> WorkerArgv(int id) const;
  absl::StatusOr<int> Spawn(const std::string& name, const std::vector<std::string>& argv);
  absl::StatusOr<std::string> WaitForAddress(const std::string& address_file);
  // Spawns the coordinator on `port` (0: any) and waits for its address.
  absl::StatusOr<std::string> SpawnCoordinator(int port);
  // Spawns one coordinator process on `port`; returns its child index.
  absl::StatusOr<int> SpawnCoordinatorProcess(int port);
  // With replicas: spawns them all and waits for the leader's address; returns every one's.
  absl::StatusOr<std::string> StartReplicas();
  // With state_store etcd: deletes the job's keys (an earlier run's state is not this job's).
  absl::Status ClearEtcdState();
  // DIR/coordinator.port: the port the coordinator that leads listens on.
  std::string PortFile() const;
  int coordinator_starts_ = 0;
  std::map<int, int> coordinator_port_;  // child index -> its port
  // child index -> when it was started: one started after the port file was written is not
  // the one that wrote it (a new standby on a dead leader's port).
  std::map<int, std::filesystem::file_time_type> coordinator_started_;
  absl::Status WaitForServersRegistered();

  const JobSpec& spec_;
  const RoleSetup setup_;
  LaunchBackend* const backend_;
  const std::atomic<int>* const interrupted_;
  std::string address_;
};

}  // namespace ecps

#endif  // ECPS_CLI_ROLE_SPAWNER_H_
