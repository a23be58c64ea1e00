// Where `ecps run` starts a job's roles. One interface with two backends, so that everything
// above it (the replacement supervisor, drills, the progress line, the report) is the same
// code whether the roles are processes on this machine or Slurm job steps:
//   local  child processes of the launcher (ProcessGroup)
//   slurm  one `srun` job step per role inside the allocation the launcher runs in (the
//          sbatch script `ecps slurm` writes); the launcher's child is that step's srun,
//          which relays the role's output into its log and exits when the role does.
// Spawn is not thread-safe (a backend may number its steps); the rest is as ProcessGroup's.
#ifndef ECPS_CLI_LAUNCH_BACKEND_H_
#define ECPS_CLI_LAUNCH_BACKEND_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cli/process_group.h"
#include "runtime/spec.h"

namespace ecps {

class LaunchBackend {
 public:
  virtual ~LaunchBackend() = default;

  virtual const char* name() const = 0;
  // The address roles bind when the spec leaves cluster.host empty.
  virtual std::string DefaultBindHost() const = 0;
  // Whether the launcher can signal a role's own process (SIGKILL and SIGSTOP drills). The
  // slurm backend cannot: its child is srun, and the role may run on another node; a kill
  // drill goes through the coordinator (Kill RPC) instead, and a stop drill is refused.
  virtual bool SignalsRoles() const = 0;

  // Starts role `name` (argv: the ecps command line, argv[0] the binary) with `env` ("K=V")
  // added to this process's environment, its output in `log_path`. Returns the child index.
  absl::StatusOr<int> Spawn(const std::string& name, const std::vector<std::string>& argv,
                            const std::vector<std::string>& env, const std::string& log_path);
  std::vector<int> Poll() { return children_.Poll(); }
  Child child(int index) const { return children_.child(index); }
  int size() const { return children_.size(); }
  int running() const { return children_.running(); }
  void Signal(int index, int sig) { children_.Signal(index, sig); }
  int StopAll(const StopPlan& plan) { return children_.StopAll(plan); }

 protected:
  // The command line that runs `argv` on this backend.
  virtual std::vector<std::string> Wrap(const std::string& name,
                                        const std::vector<std::string>& argv) = 0;

 private:
  ProcessGroup children_;
};

// OK when every drill of `spec` can run on a backend; a stop_server drill needs one that
// SignalsRoles() (INVALID_ARGUMENT saying so otherwise).
absl::Status CheckDrills(const JobSpec& spec, bool signals_roles);

std::unique_ptr<LaunchBackend> MakeLocalBackend();

// The slurm backend needs to run inside an allocation (SLURM_JOB_ID set) with srun on the
// PATH: FAILED_PRECONDITION saying which is missing otherwise. Roles are spread over the
// allocation's nodes round-robin in the order they start (the coordinator on the first).
// `worker_gpus` > 0: each worker's step asks for that many GPUs (cluster.worker_device: cuda).
absl::StatusOr<std::unique_ptr<LaunchBackend>> MakeSlurmBackend(int worker_gpus = 0);

// Which node of a Slurm allocation a step goes to (srun --relative): round-robin over the
// `nodes` in the order the steps start (the coordinator on the first), except that a name
// started before (the coordinator started again after it died) goes to the node after the
// one it had, so that a node that took its process down does not take the next one too.
// Not thread-safe.
class SlurmNodePicker {
 public:
  explicit SlurmNodePicker(int nodes) : nodes_(nodes < 1 ? 1 : nodes) {}
  int Place(const std::string& name);

 private:
  const int nodes_;
  int next_ = 0;
  std::map<std::string, int> last_;  // the node each name had last
};

// The command line of one role's job step: srun ... -- argv. `node` is the node's index in
// the allocation (srun --relative); `gpus` > 0 adds --gpus. Exposed for tests.
std::vector<std::string> SrunCommand(const std::string& srun, const std::string& name, int node,
                                     const std::vector<std::string>& argv, int gpus = 0);

}  // namespace ecps

#endif  // ECPS_CLI_LAUNCH_BACKEND_H_
