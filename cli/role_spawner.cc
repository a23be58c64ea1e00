#include "cli/role_spawner.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "coordinator/coordinator_main.h"
#include "coordinator/etcd_client.h"
#include "runtime/coordinator_client.h"
#include "runtime/net.h"
#include "runtime/security.h"

namespace ecps {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

}  // namespace

RoleSpawner::RoleSpawner(const JobSpec& spec, RoleSetup setup, LaunchBackend* backend,
                         const std::atomic<int>* interrupted)
    : spec_(spec), setup_(std::move(setup)), backend_(backend), interrupted_(interrupted) {}

std::string RoleSpawner::AddressFile() const {
  return (fs::path(setup_.out_dir) / "coordinator.address").string();
}

std::string RoleSpawner::LogPath(const std::string& name) const {
  return (fs::path(setup_.out_dir) / "logs" / (name + ".log")).string();
}

std::vector<std::string> RoleSpawner::ServerArgv(int id) const {
  // The address file too: a relaunched coordinator may listen elsewhere.
  std::vector<std::string> argv = {setup_.self,          "server",        "--spec",
                                   setup_.spec_file,     "--coordinator", address_,
                                   "--coordinator-file", AddressFile(),   "--id",
                                   std::to_string(id),   "--host",        setup_.bind_host};
  if (!spec_.cluster.advertise.empty()) {
    argv.insert(argv.end(), {"--advertise", spec_.cluster.advertise});
  }
  return argv;
}

std::vector<std::string> RoleSpawner::WorkerArgv(int id) const {
  // --host as for servers: the worker's health service and /metrics bind where the job does.
  return {setup_.self,          "worker",        "--spec",
          setup_.spec_file,     "--coordinator", address_,
          "--coordinator-file", AddressFile(),   "--id",
          std::to_string(id),   "--host",        setup_.bind_host};
}

absl::StatusOr<int> RoleSpawner::Spawn(const std::string& name,
                                       const std::vector<std::string>& argv) {
  // Each start is a fork and an exec: a thousand of them take seconds, so a signal is looked
  // for before each one.
  if (interrupted_->load() != 0) return absl::CancelledError("interrupted");
  // The coordinator and the servers check every role's token, so they get the job secret; a
  // worker gets only its role's token (docs/security.md).
  const bool worker = name.rfind("worker-", 0) == 0;
  const std::string token = worker ? RoleToken(setup_.token, Role::kWorker) : setup_.token;
  return backend_->Spawn(name, argv, {"ECPS_TOKEN=" + token}, LogPath(name));
}

absl::StatusOr<std::string> RoleSpawner::StartCoordinator() {
  std::error_code ec;
  fs::remove_all(fs::path(setup_.out_dir) / "coordinator-state", ec);
  if (ec) {
    return absl::InternalError("cannot empty the coordinator's state folder: " + ec.message());
  }
  if (spec_.coordinator.state_store == StateStoreType::kEtcd) {
    if (absl::Status cleared = ClearEtcdState(); !cleared.ok()) return cleared;
  }
  auto address = spec_.coordinator.replicas > 1 ? StartReplicas()
                                                : SpawnCoordinator(spec_.cluster.coordinator_port);
  if (!address.ok()) return address.status();
  address_ = *address;
  return address_;
}

absl::Status RoleSpawner::RestartCoordinator() {
  // Started as the first one was: on cluster.coordinator_port (0: any free port), and on
  // another node under Slurm. The roles find it through the address file it writes.
  auto address = SpawnCoordinator(spec_.cluster.coordinator_port);
  if (!address.ok()) return address.status();
  address_ = *address;
  return absl::OkStatus();
}

std::string RoleSpawner::PortFile() const {
  return (fs::path(setup_.out_dir) / "coordinator.port").string();
}

absl::StatusOr<std::string> RoleSpawner::SpawnCoordinator(int port) {
  // The coordinator writes the address it advertises (host:port) where the operator
  // commands look for it (--job DIR); under Slurm it may be on another node, so this is
  // also how the launcher learns it.
  std::error_code ec;
  fs::remove(PortFile(), ec);
  fs::remove(AddressFile(), ec);
  auto spawned = SpawnCoordinatorProcess(port);
  if (!spawned.ok()) return spawned.status();
  return WaitForAddress(AddressFile());
}

absl::StatusOr<int> RoleSpawner::SpawnCoordinatorProcess(int port) {
  std::vector<std::string> argv = {setup_.self,      "coordinator", "--spec",
                                   setup_.spec_file, "--port-file", PortFile(),
                                   "--address-file", AddressFile(), "--host",
                                   setup_.bind_host, "--port",      std::to_string(port)};
  // With etcd the state is there; the state log is one host's.
  if (spec_.coordinator.state_store == StateStoreType::kFile) {
    argv.insert(argv.end(),
                {"--state-dir", (fs::path(setup_.out_dir) / "coordinator-state").string()});
  }
  if (!spec_.cluster.advertise.empty()) {
    argv.insert(argv.end(), {"--advertise", spec_.cluster.advertise});
  }
  // A new coordinator's log goes beside the dead one's: coordinator-2.log, -3 ...
  ++coordinator_starts_;
  const std::string log = coordinator_starts_ == 1
                              ? LogPath("coordinator")
                              : LogPath("coordinator-" + std::to_string(coordinator_starts_));
  auto spawned = backend_->Spawn("coordinator", argv, {"ECPS_TOKEN=" + setup_.token}, log);
  if (!spawned.ok()) return spawned.status();
  coordinator_port_[*spawned] = port;
  coordinator_started_[*spawned] = fs::file_time_type::clock::now();
  return *spawned;
}

absl::StatusOr<std::string> RoleSpawner::StartReplicas() {
  const int replicas = spec_.coordinator.replicas;
  const int first = spec_.cluster.coordinator_port;
  if (first == 0 && backend_->name() != std::string("local")) {
    return absl::InvalidArgumentError(
        absl::StrFormat("coordinator.replicas: %d coordinators on another backend than local need "
                        "cluster.coordinator_port (they use it and the ports after it)",
                        replicas));
  }
  absl::StatusOr<std::string> host = AdvertiseHost(setup_.bind_host, spec_.cluster.advertise);
  if (!host.ok()) return host.status();
  std::error_code ec;
  fs::remove(PortFile(), ec);
  fs::remove(AddressFile(), ec);
  std::vector<std::string> addresses;
  for (int i = 0; i < replicas; ++i) {
    int port = first + i;
    if (first == 0) {
      absl::StatusOr<int> free = PickFreePort(setup_.bind_host);
      if (!free.ok()) return free.status();
      port = *free;
    }
    if (auto spawned = SpawnCoordinatorProcess(port); !spawned.ok()) return spawned.status();
    addresses.push_back(JoinHostPort(*host, port));
  }
  auto leader = WaitForAddress(AddressFile());
  if (!leader.ok()) return leader.status();
  return absl::StrJoin(addresses, ",");
}

absl::Status RoleSpawner::RestartStandby(int child) {
  auto port = coordinator_port_.find(child);
  if (port == coordinator_port_.end()) {
    return absl::InternalError(absl::StrCat("child ", child, " is not a coordinator"));
  }
  return SpawnCoordinatorProcess(port->second).status();
}

int RoleSpawner::ActiveCoordinatorChild() const {
  std::error_code ec;
  const fs::file_time_type written = fs::last_write_time(PortFile(), ec);
  if (ec) return -1;
  std::ifstream f(PortFile());
  int port = 0;
  if (!(f >> port)) return -1;
  int active = -1;
  for (const auto& [child, p] : coordinator_port_) {
    // The dead leader's replacement on the same port is a standby until it writes the file.
    if (p == port && !backend_->child(child).exited &&
        coordinator_started_.at(child) <= written) {
      active = child;
    }
  }
  return active;
}

absl::Status RoleSpawner::ClearEtcdState() {
  const CoordinatorSection& c = spec_.coordinator;
  // The launcher's own identity (the admin's, with security.tls) is one etcd trusts too.
  absl::StatusOr<std::unique_ptr<EtcdClient>> etcd =
      EtcdClient::Create(c.etcd_endpoints, absl::Seconds(1), ProcessTls());
  if (!etcd.ok()) return etcd.status();
  const std::string prefix = c.etcd_prefix + spec_.job.name + "/";
  absl::StatusOr<int64_t> deleted = (*etcd)->DeletePrefix(prefix);
  if (!deleted.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("coordinator.etcd_endpoints: etcd does not answer, so the job cannot keep its "
                     "coordinator's state there: ",
                     deleted.status().message()));
  }
  if (*deleted > 0) {
    std::printf("ecps: deleted %lld keys of an earlier job '%s' under %s in etcd\n",
                static_cast<long long>(*deleted), spec_.job.name.c_str(), prefix.c_str());
  }
  return absl::OkStatus();
}

absl::Status RoleSpawner::StartServersAndWorkers() {
  for (int i = 0; i < spec_.cluster.servers; ++i) {
    if (auto s = Spawn("server-" + std::to_string(i), ServerArgv(i)); !s.ok()) return s.status();
  }
  if (spec_.cluster.spares > 0) {
    if (absl::Status s = WaitForServersRegistered(); !s.ok()) return s;
    for (int i = 0; i < spec_.cluster.spares; ++i) {
      if (auto s = Spawn("spare-" + std::to_string(i), ServerArgv(-1)); !s.ok()) return s.status();
    }
  }
  for (int w = 0; w < spec_.cluster.workers; ++w) {
    if (auto s = Spawn("worker-" + std::to_string(w), WorkerArgv(w)); !s.ok()) return s.status();
  }
  return absl::OkStatus();
}

absl::StatusOr<int> RoleSpawner::SpawnReplacement(v1::Role role, int id, const std::string& name) {
  return Spawn(name, role == v1::ROLE_SERVER ? ServerArgv(id) : WorkerArgv(id));
}

absl::Status RoleSpawner::WaitForServersRegistered() {
  CoordinatorClient client(address_, RoleToken(setup_.token, Role::kAdmin), "launcher",
                           spec_.cluster.rpc_timeout_ms);
  auto deadline = Clock::now() + std::chrono::seconds(120);
  while (Clock::now() < deadline) {
    if (interrupted_->load() != 0) return absl::CancelledError("interrupted");
    auto status = client.Status();
    if (status.ok()) {
      int registered = 0;
      for (const auto& n : status->nodes()) {
        registered += n.role() == v1::ROLE_SERVER && n.id() >= 0 && n.state() != v1::NODE_STANDBY;
      }
      if (registered >= spec_.cluster.servers) return absl::OkStatus();
    }
    for (int i : backend_->Poll()) {
      const Child& c = backend_->child(i);
      return absl::InternalError(c.name + " exited (" + DescribeExit(c.exit_status) +
                                 ") while starting; its log " + c.log_path + " ends with:\n" +
                                 TailFile(c.log_path, 10));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return absl::DeadlineExceededError("the servers did not register within 120 s");
}

absl::StatusOr<std::string> RoleSpawner::WaitForAddress(const std::string& address_file) {
  // A Slurm step may first wait for a node to start it.
  const int wait_s = backend_->name() == std::string("local") ? 30 : 120;
  auto deadline = Clock::now() + std::chrono::seconds(wait_s);
  while (Clock::now() < deadline) {
    if (interrupted_->load() != 0) return absl::CancelledError("interrupted");
    std::ifstream f(address_file);
    std::string address;
    if (std::getline(f, address) && CheckDialAddress(address).ok()) return address;
    for (int i : backend_->Poll()) {
      // A restart waits while the job runs: another role's exit is not this wait's business
      // (the launcher sees it in the job's status).
      const Child& c = backend_->child(i);
      if (c.name != "coordinator") continue;
      if (WIFEXITED(c.exit_status) && WEXITSTATUS(c.exit_status) == kExitStateDamaged) {
        return absl::DataLossError(
            "the coordinator cannot take the job over: its saved state is damaged (no other "
            "would find better); its log " + c.log_path + " ends with:\n" +
            TailFile(c.log_path, 1));
      }
      return absl::InternalError("the coordinator exited (" + DescribeExit(c.exit_status) +
                                 ") before listening; its log " + c.log_path + " ends with:\n" +
                                 TailFile(c.log_path, 10));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return absl::DeadlineExceededError(
      absl::StrFormat("the coordinator did not start listening within %d s", wait_s));
}

}  // namespace ecps
