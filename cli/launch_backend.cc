#include "cli/launch_backend.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace ecps {
namespace {

class LocalBackend : public LaunchBackend {
 public:
  const char* name() const override { return "local"; }
  // A job on one machine stays on loopback unless the spec says otherwise.
  std::string DefaultBindHost() const override { return "127.0.0.1"; }
  bool SignalsRoles() const override { return true; }

 protected:
  std::vector<std::string> Wrap(const std::string&, const std::vector<std::string>& argv) override {
    return argv;
  }
};

class SlurmBackend : public LaunchBackend {
 public:
  SlurmBackend(std::string srun, int nodes, int worker_gpus)
      : srun_(std::move(srun)), nodes_(nodes), worker_gpus_(worker_gpus) {}
  const char* name() const override { return "slurm"; }
  // Peers on other nodes must reach every role.
  std::string DefaultBindHost() const override { return "0.0.0.0"; }
  bool SignalsRoles() const override { return false; }

 protected:
  std::vector<std::string> Wrap(const std::string& name,
                                const std::vector<std::string>& argv) override {
    const bool worker = name.rfind("worker-", 0) == 0;
    return SrunCommand(srun_, name, nodes_.Place(name), argv, worker ? worker_gpus_ : 0);
  }

 private:
  const std::string srun_;
  SlurmNodePicker nodes_;
  const int worker_gpus_;
};

// The first executable `name` on $PATH, or "".
std::string FindOnPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return "";
  for (absl::string_view dir : absl::StrSplit(path, ':')) {
    if (dir.empty()) continue;
    std::string candidate = absl::StrCat(dir, "/", name);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

}  // namespace

absl::StatusOr<int> LaunchBackend::Spawn(const std::string& name,
                                         const std::vector<std::string>& argv,
                                         const std::vector<std::string>& env,
                                         const std::string& log_path) {
  return children_.Spawn(name, Wrap(name, argv), env, log_path);
}

absl::Status CheckDrills(const JobSpec& spec, bool signals_roles) {
  if (signals_roles) return absl::OkStatus();
  for (const FaultSpec& f : spec.faults) {
    if (f.action == FaultAction::kKillCoordinator) {
      return absl::InvalidArgumentError(
          "faults: kill_coordinator drills need processes the launcher can signal (ecps run's "
          "local processes)");
    }
    if (f.action == FaultAction::kStopServer) {
      return absl::InvalidArgumentError(
          "faults: stop_server drills need processes the launcher can signal (ecps run's local "
          "processes); under Slurm only kill_server and kill_worker run (through the "
          "coordinator)");
    }
  }
  return absl::OkStatus();
}

std::unique_ptr<LaunchBackend> MakeLocalBackend() { return std::make_unique<LocalBackend>(); }

absl::StatusOr<std::unique_ptr<LaunchBackend>> MakeSlurmBackend(int worker_gpus) {
  const char* job = std::getenv("SLURM_JOB_ID");
  if (job == nullptr || *job == '\0') {
    return absl::FailedPreconditionError(
        "--backend slurm runs inside a Slurm allocation (SLURM_JOB_ID is not set): submit the "
        "script `ecps slurm SPEC` writes with sbatch");
  }
  std::string srun = FindOnPath("srun");
  if (srun.empty()) return absl::FailedPreconditionError("srun is not on the PATH");
  int nodes = 1;
  const char* n = std::getenv("SLURM_JOB_NUM_NODES");
  if (n == nullptr) n = std::getenv("SLURM_NNODES");
  if (n != nullptr && (!absl::SimpleAtoi(n, &nodes) || nodes < 1)) nodes = 1;
  return std::unique_ptr<LaunchBackend>(std::make_unique<SlurmBackend>(srun, nodes, worker_gpus));
}

int SlurmNodePicker::Place(const std::string& name) {
  auto [it, first] = last_.try_emplace(name, 0);
  it->second = first ? next_++ % nodes_ : (it->second + 1) % nodes_;
  return it->second;
}

std::vector<std::string> SrunCommand(const std::string& srun, const std::string& name, int node,
                                     const std::vector<std::string>& argv, int gpus) {
  std::vector<std::string> out = {
      srun,
      // One task on one node of the allocation, chosen by the launcher.
      "--nodes=1", "--ntasks=1", absl::StrCat("--relative=", node),
      // Steps share the allocation's CPUs: a job has more roles than a node has cores.
      "--overlap",
      // A role that exits does not end the others' steps: the supervisor replaces it.
      "--kill-on-bad-exit=0", absl::StrCat("--job-name=", name),
      // srun's own notes ("step created", "task exited") would only clutter the role's log.
      "--quiet",
      // The environment (ECPS_TOKEN among it) travels with the step: never on a command line.
      "--export=ALL"};
  // A GPU worker's step: its GPUs out of the allocation's (#SBATCH --gpus), visible to it only.
  if (gpus > 0) out.push_back(absl::StrCat("--gpus=", gpus));
  out.push_back("--");
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

}  // namespace ecps
