#include "cli/bench_command.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/launcher.h"
#include "cli/python_script.h"
#include "nlohmann/json.hpp"
#include "runtime/spec.h"
#include "worker/local_trainer.h"

namespace ecps {

int RunThroughputBench(const std::string& spec_path, const std::string& output_dir) {
  auto spec = LoadSpecFile(spec_path);
  if (!spec.ok()) {
    std::fprintf(stderr, "ecps: invalid spec:\n%s\n", std::string(spec.status().message()).c_str());
    return 2;
  }
  std::string out = output_dir.empty() ? spec->job.output_dir : output_dir;

  // 1. In-process, no servers: the same model, data, batch and steps, one process.
  auto trainer = LocalTrainer::Create(*spec);
  if (!trainer.ok()) {
    std::fprintf(stderr, "ecps: %s\n", trainer.status().ToString().c_str());
    return 1;
  }
  std::printf("ecps bench: in-process reference, %lld steps...\n",
              static_cast<long long>(spec->job.steps));
  std::fflush(stdout);
  auto t0 = std::chrono::steady_clock::now();
  if (absl::Status s = (*trainer)->Train(spec->job.steps); !s.ok()) {
    std::fprintf(stderr, "ecps: %s\n", s.ToString().c_str());
    return 1;
  }
  double local_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double local_rate = (*trainer)->samples() / local_s;
  trainer->reset();

  // 2. The distributed job.
  std::printf("ecps bench: ecps run with %d servers and %d workers...\n", spec->cluster.servers,
              spec->cluster.workers);
  std::fflush(stdout);
  RunFlags flags;
  flags.spec_path = spec_path;
  flags.output_dir = out;
  flags.progress = false;
  if (int rc = RunJob(flags); rc != 0) return 1;
  std::ifstream in(std::filesystem::path(out) / "report.json");
  const nlohmann::json report = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (report.is_discarded() || !report.contains("samples_per_s") ||
      !report["samples_per_s"].is_number()) {
    std::fprintf(stderr, "ecps: report.json has no samples_per_s\n");
    return 1;
  }
  double ps_rate = report["samples_per_s"].get<double>();
  double ratio = local_rate > 0 ? ps_rate / local_rate : 0;
  std::printf("ecps bench: in-process %.0f samples/s | ecps run %.0f samples/s | ratio %.3f\n",
              local_rate, ps_rate, ratio);
  const nlohmann::ordered_json bench = {
      {"spec", spec_path},
      {"steps", spec->job.steps},
      {"batch_size", spec->data.batch_size},
      {"in_process_samples_per_s", std::round(local_rate * 10) / 10},
      {"ecps_run_samples_per_s", std::round(ps_rate * 10) / 10},
      {"ratio", std::round(ratio * 1e4) / 1e4},
  };
  std::ofstream(std::filesystem::path(out) / "bench.json")
      << bench.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
  return 0;
}

namespace {

// One run of the recovery benchmark: its fault-tolerance mode, its checkpoint interval (0:
// none), and whether it gets the failure.
struct RecoveryVariant {
  std::string name;
  FaultToleranceMode mode;
  int64_t interval;
  bool fault;
};

// The failure every faulty run gets: the spec's first kill_server drill, else server 1 at
// 40% of the steps.
FaultSpec RecoveryBenchFailure(const JobSpec& base) {
  for (const FaultSpec& f : base.faults) {
    if (f.action == FaultAction::kKillServer) return f;
  }
  FaultSpec fault;
  fault.action = FaultAction::kKillServer;
  fault.target = std::min(1, base.cluster.servers - 1);
  fault.at_step = std::max<int64_t>(1, base.job.steps * 2 / 5);
  return fault;
}

// none without the failure (the steady-state reference), then erasure_code, replication, and
// checkpoint at two intervals: the spec's, else a tenth of the job, and twice that.
std::vector<RecoveryVariant> RecoveryVariants(const JobSpec& base) {
  const int64_t interval = base.fault_tolerance.checkpoint.interval_steps > 0
                               ? base.fault_tolerance.checkpoint.interval_steps
                               : std::max<int64_t>(1, base.job.steps / 10);
  return {
      {"none", FaultToleranceMode::kNone, 0, false},
      {"erasure_code", FaultToleranceMode::kErasureCode, 0, true},
      {"replication", FaultToleranceMode::kReplication, 0, true},
      {"checkpoint-" + std::to_string(interval), FaultToleranceMode::kCheckpoint, interval, true},
      {"checkpoint-" + std::to_string(2 * interval), FaultToleranceMode::kCheckpoint, 2 * interval,
       true},
  };
}

// The job of one variant, in its own folder under `out`: the base job under the variant's
// mode, every variant with the same r and enough servers for the spec's k + r (k 4 unless the
// spec is erasure_code), a spare for the faulty ones, and no drill but `fault`.
JobSpec RecoveryVariantSpec(const JobSpec& base, const RecoveryVariant& v, const FaultSpec& fault,
                            const std::filesystem::path& out) {
  const int k =
      base.fault_tolerance.mode == FaultToleranceMode::kErasureCode ? base.fault_tolerance.k : 4;
  const int r = std::max(1, base.fault_tolerance.r);
  JobSpec spec = base;
  spec.job.name = base.job.name + "-" + v.name;
  spec.job.output_dir = (out / v.name).string();
  spec.fault_tolerance.mode = v.mode;
  spec.fault_tolerance.k = v.mode == FaultToleranceMode::kErasureCode ? k : 1;
  spec.fault_tolerance.r = r;
  spec.fault_tolerance.dense_replicas = KeepsRedundancy(v.mode) ? r : 0;
  spec.fault_tolerance.checkpoint.interval_steps = v.interval;
  spec.fault_tolerance.checkpoint.interval_seconds = 0;
  spec.fault_tolerance.checkpoint.dir = (out / v.name / "checkpoints").string();
  spec.cluster.servers = std::max(base.cluster.servers, k + r);
  spec.cluster.spares = v.fault ? std::max(1, base.cluster.spares) : 0;
  spec.monitoring.progress = false;
  spec.faults.clear();
  if (v.fault) spec.faults.push_back(fault);
  return spec;
}

// Writes the variant's spec to out/NAME.yaml, checks that it loads back, and runs it under
// `ecps run`. Returns 0 when the run finished, 1 when it failed, 2 when the variant is not a
// valid job.
int RunRecoveryVariant(const JobSpec& base, const RecoveryVariant& v, const FaultSpec& fault,
                       const std::filesystem::path& out) {
  const JobSpec spec = RecoveryVariantSpec(base, v, fault, out);
  const std::filesystem::path file = out / (v.name + ".yaml");
  {
    std::ofstream f(file);
    f << SpecToYaml(spec);
  }
  if (auto check = LoadSpecFile(file.string()); !check.ok()) {
    std::fprintf(stderr, "ecps bench: the %s variant is not a valid job:\n%s\n", v.name.c_str(),
                 std::string(check.status().message()).c_str());
    return 2;
  }
  const std::string failure = v.fault
                                  ? absl::StrCat(" with ", ToString(fault.action), " of server ",
                                                 fault.target, " at step ", fault.at_step)
                                  : " (no failure: the steady-state reference)";
  std::printf("ecps bench: %s%s\n", v.name.c_str(), failure.c_str());
  std::fflush(stdout);
  RunFlags flags;
  flags.spec_path = file.string();
  flags.output_dir = spec.job.output_dir;
  flags.progress = false;
  if (RunJob(flags) != 0) {
    std::fprintf(stderr, "ecps bench: the %s run failed (logs in %s/logs)\n", v.name.c_str(),
                 spec.job.output_dir.c_str());
    return 1;
  }
  return 0;
}

// deploy/recovery_report.py over every variant's folder (a failed run's too): report.md and
// timelines.png in `out`. False, having said why, when there is no report.
bool WriteRecoveryReport(const JobSpec& base, const std::filesystem::path& out,
                         const std::vector<RecoveryVariant>& variants) {
  std::vector<std::string> args = {
      out.string(),
      absl::StrCat("--node-mtbf-hours=", base.fault_tolerance.checkpoint.node_mtbf_hours)};
  for (const RecoveryVariant& v : variants) args.push_back(v.name);
  absl::Status reported =
      RunPythonScript("recovery_report.py", args, (out / "report.log").string());
  if (!reported.ok()) {
    std::fprintf(stderr, "ecps bench: no report: %s\n", std::string(reported.message()).c_str());
    return false;
  }
  std::printf("ecps bench: report %s/report.md, plot %s/timelines.png\n", out.c_str(),
              out.c_str());
  return true;
}

}  // namespace

int RunRecoveryBench(const std::string& spec_path, const std::string& output_dir) {
  auto loaded = LoadSpecFile(spec_path);
  if (!loaded.ok()) {
    std::fprintf(stderr, "ecps: invalid spec:\n%s\n",
                 std::string(loaded.status().message()).c_str());
    return 2;
  }
  const JobSpec base = *loaded;
  const std::filesystem::path out =
      output_dir.empty() ? std::filesystem::path(base.job.output_dir) / "bench-recovery"
                         : std::filesystem::path(output_dir);
  std::error_code ec;
  std::filesystem::create_directories(out, ec);
  if (ec) {
    std::fprintf(stderr, "ecps: cannot create %s: %s\n", out.c_str(), ec.message().c_str());
    return 2;
  }
  const FaultSpec fault = RecoveryBenchFailure(base);
  const std::vector<RecoveryVariant> variants = RecoveryVariants(base);
  int failed = 0;
  for (const RecoveryVariant& v : variants) {
    const int rc = RunRecoveryVariant(base, v, fault, out);
    if (rc == 2) return 2;
    if (rc != 0) ++failed;
  }
  if (!WriteRecoveryReport(base, out, variants)) return 1;
  return failed == 0 ? 0 : 1;
}

}  // namespace ecps
