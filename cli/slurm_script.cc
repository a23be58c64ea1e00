#include "cli/slurm_script.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "cli/launch_backend.h"
#include "cli/process_group.h"
#include "runtime/net.h"

namespace ecps {
namespace {

namespace fs = std::filesystem;

}  // namespace

absl::StatusOr<std::string> SlurmScript(const JobSpec& spec, const SlurmScriptPaths& paths) {
  const SlurmSection& slurm = spec.slurm;
  if (slurm.nodes > 1 && IsLoopbackHost(spec.cluster.host)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cluster.host is ", spec.cluster.host, ", which the other ", slurm.nodes - 1,
        " node(s) of slurm.nodes cannot reach: leave it empty (every interface) or set it"));
  }
  if (absl::Status s = CheckDrills(spec, /*signals_roles=*/false); !s.ok()) return s;
  const int roles = 1 + spec.cluster.servers + spec.cluster.spares + spec.cluster.workers;
  std::string s;
  absl::StrAppend(&s, "#!/bin/bash\n",
                  "# Written by `ecps slurm` from ", paths.spec, ". Submit it with sbatch.\n",
                  "# `ecps run --backend slurm` starts one job step (srun) per role: the "
                  "coordinator, ", spec.cluster.servers, " servers, ", spec.cluster.spares,
                  " spares, ", spec.cluster.workers, " workers;\n",
                  "# it replaces dead servers and workers with new steps and writes "
                  "report.json, metrics.csv and logs/ into\n# ", paths.output_dir,
                  " (it must be on a filesystem every node sees). The job token is made at run "
                  "time\n# and reaches the steps in their environment, never on a command line.\n");
  auto directive = [&s](const std::string& option) { absl::StrAppend(&s, "#SBATCH ", option, "\n"); };
  directive("--job-name=" + spec.job.name);
  directive(absl::StrCat("--nodes=", slurm.nodes));
  // One task per role; replacements are further steps that share them (srun --overlap).
  directive(absl::StrCat("--ntasks=", roles));
  // More roles than CPUs is normal: servers and workers wait on each other.
  directive("--overcommit");
  // GPU workers: the allocation holds every worker's GPUs; each worker's step takes its own.
  if (spec.cluster.worker_device == WorkerDevice::kCuda) {
    directive(absl::StrCat("--gpus=", spec.cluster.workers * spec.cluster.gpus_per_worker));
  }
  directive("--output=" + paths.output_dir + "/slurm-%j.out");
  if (!slurm.partition.empty()) directive("--partition=" + slurm.partition);
  if (!slurm.time.empty()) directive("--time=" + slurm.time);
  if (!slurm.account.empty()) directive("--account=" + slurm.account);
  for (const std::string& option : slurm.sbatch_options) directive(option);
  absl::StrAppend(&s, "set -euo pipefail\n",
                  "exec ", ShellQuote(paths.binary), " run ", ShellQuote(paths.spec),
                  " --backend slurm --output ", ShellQuote(paths.output_dir), " --no-progress\n");
  return s;
}

int RunSlurmCommand(const std::string& spec_path, const std::string& script_path,
                    const std::string& output_dir) {
  auto spec = LoadSpecFile(spec_path);
  if (!spec.ok()) {
    std::fprintf(stderr, "ecps slurm: invalid spec:\n%s\n",
                 std::string(spec.status().message()).c_str());
    return 2;
  }
  std::error_code ec;
  SlurmScriptPaths paths;
  paths.spec = fs::absolute(spec_path, ec).lexically_normal().string();
  paths.output_dir =
      fs::absolute(output_dir.empty() ? spec->job.output_dir : output_dir, ec).lexically_normal()
          .string();
  paths.binary = spec->slurm.binary.empty() ? SelfPath() : spec->slurm.binary;
  auto script = SlurmScript(*spec, paths);
  if (!script.ok()) {
    std::fprintf(stderr, "ecps slurm: %s\n", std::string(script.status().message()).c_str());
    return 2;
  }
  // sbatch does not create the folder its --output names.
  fs::create_directories(paths.output_dir, ec);
  if (ec) {
    std::fprintf(stderr, "ecps slurm: cannot create %s: %s\n", paths.output_dir.c_str(),
                 ec.message().c_str());
    return 2;
  }
  if (script_path == "-") {
    std::fputs(script->c_str(), stdout);
    return 0;
  }
  const std::string path = script_path.empty()
                               ? (fs::path(paths.output_dir) / (spec->job.name + ".sbatch")).string()
                               : script_path;
  std::ofstream f(path);
  f << *script;
  f.close();
  if (!f) {
    std::fprintf(stderr, "ecps slurm: cannot write %s\n", path.c_str());
    return 2;
  }
  std::printf("ecps slurm: wrote %s\nsubmit it with: sbatch %s\n", path.c_str(), path.c_str());
  return 0;
}

}  // namespace ecps
