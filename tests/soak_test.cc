// Soak: failure after failure under `ecps run`, real processes and real signals. A seeded
// list of drills (SIGKILL of a random server, SIGSTOP of one past the heartbeat timeout, a
// rebuilding replacement killed, a worker killed, the coordinator killed and kept down a
// second, up to 3 times) runs against one job; it must finish every
// step with every failure recovered and a clean scrub, and the servers' memory must stay flat
// from the fifth failure on. Short form by default (8 failures); ECPS_SOAK_FAILURES=20 for
// the long one (docs/recovery.md). The counting proof that no acknowledged update is lost
// over many failures is Soak.EveryAcknowledgedUpdateSurvivesFailureAfterFailure
// (tests/recovery_test.cc).
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <regex>
#include <string>

#include "gtest/gtest.h"
#include "proto/ecps.pb.h"
#include "tests/ecps_process.h"
#include "tests/job_status.h"

namespace ecps {
namespace {

using namespace testing_process;  // NOLINT: TempDir, ReadFile, Start, WaitFor
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr int kSpacing = 300;  // steps between drills

// Resident memory of `pid` in KiB (0 when it is gone).
int64_t RssKib(int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  while (in >> key) {
    if (key == "VmRSS:") {
      int64_t kib = 0;
      in >> kib;
      return kib;
    }
  }
  return 0;
}

int64_t ServersRss(const v1::StatusResponse& st) {
  int64_t sum = 0;
  for (const v1::NodeInfo& n : st.nodes()) {
    if (n.role() == v1::ROLE_SERVER && n.state() == v1::NODE_ACTIVE) sum += RssKib(n.pid());
  }
  return sum;
}

// The soak's drills, in a spec's faults: list.
struct SoakDrills {
  std::string yaml;
  int planned = 0;            // failures of servers and workers
  int coordinator_kills = 0;  // besides them
  int steps = 0;              // the job's steps: room for every drill
};

// A seeded list of drills, `failures` of servers and workers, kSpacing steps apart.
SoakDrills PlanDrills(int failures) {
  std::mt19937 rng(1201);
  std::string drills;
  int step = kSpacing, planned = 0, coordinator_kills = 0;
  // At least one coordinator kill, however few failures: with ECPS_SOAK_FAILURES=5 (what
  // deploy/sanitize.sh sets when its labels include soak) the plan ended before the fifth
  // drill, the first kill, and the test's own check of a takeover failed.
  for (int i = 0; planned < failures || coordinator_kills == 0; ++i) {
    // Every fifth drill kills the coordinator (down 1 s), as often as `ecps run` restarts it.
    const int kind = i % 5 == 4 && coordinator_kills < 3 ? 4 : i % 5 % 4;
    const int target = static_cast<int>(rng() % 4);
    const std::string at = std::to_string(step);
    if (kind == 0) {
      drills += "  - {at_step: " + at + ", action: kill_server, target: " +
                std::to_string(target) + "}\n";
      planned += 1;
    } else if (kind == 1) {
      drills += "  - {at_step: " + at + ", action: stop_server, target: " +
                std::to_string(target) + ", duration_s: 2.5}\n";
      planned += 1;
    } else if (kind == 2) {  // a server, then its replacement while it rebuilds
      drills += "  - {at_step: " + at + ", action: kill_server, target: " +
                std::to_string(target) + "}\n  - {at_step: " + std::to_string(step + 10) +
                ", action: kill_server, target: " + std::to_string(target) + "}\n";
      planned += 2;
    } else if (kind == 3) {
      drills += "  - {at_step: " + at + ", action: kill_worker, target: 0}\n";
      planned += 1;
    } else {
      drills += "  - {at_step: " + at + ", action: kill_coordinator, duration_s: 1}\n";
      coordinator_kills += 1;
    }
    step += kSpacing;
  }
  SoakDrills plan;
  plan.yaml = drills;
  plan.planned = planned;
  plan.coordinator_kills = coordinator_kills;
  plan.steps = step + kSpacing;
  return plan;
}

// The soak job's spec at `path`: `steps` steps, 4 servers and a spare, (2, 2) erasure
// coding, `drills` as its faults.
void WriteSoakSpec(const fs::path& path, int steps, const std::string& drills) {
  std::ofstream(path)
      << "job:\n  name: soak\n  steps: " << steps
      << "\n  eval_every: 0\n  eval_samples: 1024\n"
         "cluster:\n  servers: 4\n  spares: 1\n  workers: 1\n"
         "  heartbeat_interval_ms: 100\n  heartbeat_timeout_ms: 1000\n  rpc_timeout_ms: 5000\n"
         "model:\n  embedding_dim: 8\n  bottom_mlp: [32, 8]\n  top_mlp: [32, 16]\n"
         "  table_rows: 2000\n"
         "optimizer:\n  sparse: {type: adagrad, lr: 0.05}\n  dense: {type: adam, lr: 0.003}\n"
         "data:\n  source: synthetic\n  batch_size: 128\n"
         "fault_tolerance:\n  mode: erasure_code\n  k: 2\n  r: 2\n"
         "faults:\n"
      << drills << "monitoring:\n  metrics_interval_ms: 100\n  report_every_steps: 1\n";
}

TEST(Soak, FailureAfterFailureEndsWithEveryStepAndACleanScrub) {
  const char* env = std::getenv("ECPS_SOAK_FAILURES");
  const int failures = env != nullptr ? std::max(5, std::atoi(env)) : 8;
  const SoakDrills plan = PlanDrills(failures);
  const std::string& drills = plan.yaml;
  const int planned = plan.planned, coordinator_kills = plan.coordinator_kills;
  const int steps = plan.steps;
  fs::path dir = TempDir("soak");
  const fs::path job = dir / "out";
  WriteSoakSpec(dir / "job.yaml", steps, drills);
  pid_t run = Start({"run", (dir / "job.yaml").string(), "--output", job.string(),
                     "--no-progress"},
                    dir / "run.log");

  // The servers' memory once five failures are behind, and at the end of training.
  int64_t rss_at_fifth = 0, rss_last = 0;
  const auto deadline = Clock::now() + std::chrono::seconds(600);
  while (Clock::now() < deadline) {
    int status = 0;
    if (waitpid(run, &status, WNOHANG) == run) {
      run = -status - 1;  // exited: keep its status
      break;
    }
    auto st = JobStatus(dir, job);
    if (!st.has_value()) continue;
    int recovered = 0;
    for (const v1::FailureEvent& e : st->failures()) {
      recovered += e.state() == v1::FAILURE_RECOVERED;
    }
    const bool all_active = st->phase() == v1::JOB_RUNNING;
    if (rss_at_fifth == 0 && recovered >= 5 && all_active) rss_at_fifth = ServersRss(*st);
    if (rss_at_fifth > 0 && all_active && st->step() < steps) rss_last = ServersRss(*st);
  }
  ASSERT_LT(run, 0) << "ecps run did not finish; log:\n" << ReadFile(dir / "run.log");
  const int status = -run - 1;
  const std::string log = ReadFile(dir / "run.log");
  const std::string report = ReadFile(job / "report.json");
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << log;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(report, m, std::regex("\"steps\": ([0-9]+)")));
  EXPECT_EQ(std::stoi(m[1]), steps) << report;
  EXPECT_NE(report.find("\"scrub\": {\"done\": true, \"clean\": true"), std::string::npos)
      << report;
  int recovered = 0, declared = 0;
  std::string rest = report.substr(0, report.find("\"final_status\""));
  while (std::regex_search(rest, m, std::regex("\"state\": \"([a-z]+)\""))) {
    ++declared;
    recovered += m[1] == "recovered";
    rest = m.suffix();
  }
  EXPECT_EQ(declared, planned) << report;
  EXPECT_EQ(recovered, planned) << report;
  int taken_over = 0;
  for (size_t at = report.find("\"step_at_death\""); at != std::string::npos;
       at = report.find("\"step_at_death\"", at + 1)) {
    ++taken_over;
  }
  EXPECT_EQ(taken_over, coordinator_kills) << report;
  EXPECT_GE(coordinator_kills, 1);
  ASSERT_GT(rss_at_fifth, 0) << "never saw the job running with five failures recovered";
  ASSERT_GT(rss_last, 0);
  EXPECT_LT(rss_last, rss_at_fifth * 5 / 4)
      << "servers' memory grew from " << rss_at_fifth << " KiB at the fifth failure to "
      << rss_last << " KiB";
  std::printf("soak: %d failures and %d coordinator kills over %d steps; servers' RSS %lld KiB "
              "at the fifth failure, %lld KiB at the end\n",
              planned, coordinator_kills, steps, static_cast<long long>(rss_at_fifth),
              static_cast<long long>(rss_last));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ecps
