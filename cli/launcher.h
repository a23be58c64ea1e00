// `ecps run SPEC`: the embedded launcher. Starts the coordinator, the servers (and spares)
// and the workers of a job, as child processes on this machine or as Slurm job steps
// (cli/launch_backend.h), replaces those that die, shows one live progress line,
// writes the metrics timeline (metrics.csv) and the final report (report.json) into the
// job's output folder, and stops every child on exit, error or Ctrl-C.
#ifndef ECPS_CLI_LAUNCHER_H_
#define ECPS_CLI_LAUNCHER_H_

#include <string>

namespace ecps {

// How `ecps run` starts its roles (--backend): processes of this machine, or job steps inside
// the allocation of `ecps slurm`.
enum class LaunchBackendKind { kLocal, kSlurm };

struct RunFlags {
  std::string spec_path;
  std::string output_dir;  // overrides job.output_dir when not empty
  bool progress = true;    // the live progress line (also off when the spec says so)
  LaunchBackendKind backend = LaunchBackendKind::kLocal;
};

// Returns the process exit code: 0 when the job finished, 1 when it failed, 2 for a bad
// spec or a job that could not start. SIGINT, SIGTERM or SIGHUP does not return: every child
// is stopped within a few seconds and the process ends with exit code 130 (cli/interrupt.h).
int RunJob(const RunFlags& flags);

}  // namespace ecps

#endif  // ECPS_CLI_LAUNCHER_H_
