// `ecps slurm SPEC [-o FILE]`: the sbatch script that runs a job under Slurm. The script
// asks for the allocation (slurm: in the spec; docs/deploy.md maps every key) and runs
// `ecps run --backend slurm` in it: the same launcher as on one machine, which starts the
// coordinator, servers, spares and workers as one `srun` job step each and starts
// replacements for dead ones as new steps (cli/launch_backend.h).
#ifndef ECPS_CLI_SLURM_SCRIPT_H_
#define ECPS_CLI_SLURM_SCRIPT_H_

#include <string>

#include "absl/status/statusor.h"
#include "runtime/spec.h"

namespace ecps {

struct SlurmScriptPaths {
  std::string spec;        // the spec file, absolute
  std::string output_dir;  // the job's folder, absolute; every node must see it
  std::string binary;      // ecps on the nodes, absolute
};

// The script's text. INVALID_ARGUMENT when the spec cannot run under Slurm (a loopback
// cluster.host over several nodes, stop_server drills).
absl::StatusOr<std::string> SlurmScript(const JobSpec& spec, const SlurmScriptPaths& paths);

// The command: writes the script to `script_path` ("-": standard output; empty:
// <output_dir>/<job name>.sbatch), creating the job's folder (sbatch writes its output
// there). `output_dir` overrides job.output_dir when set. Returns the exit code (2: bad
// spec or arguments).
int RunSlurmCommand(const std::string& spec_path, const std::string& script_path,
                    const std::string& output_dir);

}  // namespace ecps

#endif  // ECPS_CLI_SLURM_SCRIPT_H_
