#include "cli/bench_command.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "absl/strings/str_format.h"
#include "cli/launcher.h"
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
  std::stringstream report;
  report << in.rdbuf();
  std::smatch m;
  std::string text = report.str();
  if (!std::regex_search(text, m, std::regex("\"samples_per_s\": ([0-9.]+)"))) {
    std::fprintf(stderr, "ecps: report.json has no samples_per_s\n");
    return 1;
  }
  double ps_rate = std::stod(m[1]);
  double ratio = local_rate > 0 ? ps_rate / local_rate : 0;
  std::printf("ecps bench: in-process %.0f samples/s | ecps run %.0f samples/s | ratio %.3f\n",
              local_rate, ps_rate, ratio);
  std::ofstream json(std::filesystem::path(out) / "bench.json");
  json << absl::StrFormat(
      "{\n  \"spec\": \"%s\",\n  \"steps\": %d,\n  \"batch_size\": %d,\n"
      "  \"in_process_samples_per_s\": %.1f,\n  \"ecps_run_samples_per_s\": %.1f,\n"
      "  \"ratio\": %.4f\n}\n",
      spec_path, spec->job.steps, spec->data.batch_size, local_rate, ps_rate, ratio);
  return 0;
}

}  // namespace ecps
