// End-to-end recovery drills of the coordinator: `ecps run` with a `faults:` section that
// kills it (alone, with a server, during a rebuild) or damages its state log. The servers and
// workers train on while it is down; the new one takes the job over from its state log.
//
// No sleeps as synchronisation: every wait is on a condition (a process exit) with a deadline.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "proto/ecps.pb.h"
#include "tests/e2e_recovery_util.h"
#include "tests/ecps_process.h"
#include "tests/job_status.h"

namespace ecps {
namespace {

using namespace testing_process;  // NOLINT: TempDir, ReadFile, Start, WaitFor, StartRun, Spec
namespace fs = std::filesystem;

// The coordinator is killed mid-training: the servers and the worker train on without it,
// `ecps run` starts a new one on the same address, which takes the job over from its state
// log (the same instances, epoch and failure history) and later recovers a killed server.
TEST(EndToEndRecovery, KilledCoordinatorIsRestartedAndTakesTheJobOver) {
  fs::path dir = TempDir("coordinator");
  std::string log;
  const std::string report = RunToEnd(
      dir,
      Spec("kill-coordinator", 500, 3, 1, 1, "  mode: erasure_code\n  k: 2\n  r: 1\n",
           "  - {at_step: 120, action: kill_coordinator}\n"
           "  - {at_step: 300, action: kill_server, target: 2}\n"),
      &log);
  ASSERT_NE(report.find("\"ok\": true"), std::string::npos) << report << log;
  EXPECT_EQ(IntField(report, "steps"), 500) << report;
  EXPECT_NE(report.find("\"scrub\": {\"done\": true, \"clean\": true"), std::string::npos)
      << report;
  EXPECT_NE(log.find("SIGKILL the coordinator"), std::string::npos) << log;
  EXPECT_NE(log.find("a new one took the job over in"), std::string::npos) << log;
  // Training went on while it was down.
  const int64_t at_death = IntField(report, "step_at_death");
  const int64_t at_restart = IntField(report, "step_at_restart");
  EXPECT_GE(at_death, 120) << report;
  EXPECT_GT(at_restart, at_death) << report;
  EXPECT_GE(IntField(report, "downtime_s"), 0) << report;
  // The server killed after the takeover was recovered by the new coordinator.
  EXPECT_NE(report.find("\"node\": \"server 2\""), std::string::npos) << report;
  EXPECT_NE(report.find("\"state\": \"recovered\""), std::string::npos) << report;
  const std::string second = ReadFile(dir / "out" / "logs" / "coordinator-2.log");
  EXPECT_NE(second.find("as term 2"), std::string::npos) << second;
  fs::remove_all(dir);
}

// The worker-0 log's evaluation lines, as (seconds since midnight, step): the worker's own
// record of its progress, written whether or not a coordinator listens.
std::vector<std::pair<double, int64_t>> EvalTimes(const std::string& log) {
  std::vector<std::pair<double, int64_t>> out;
  static const std::regex line(
      R"(\[(\d\d):(\d\d):(\d\d)\.(\d\d\d)\] \[worker\] \[info\] worker 0: step (\d+) eval)");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), line); it != std::sregex_iterator();
       ++it) {
    const std::smatch& m = *it;
    out.emplace_back(std::stoi(m[1]) * 3600 + std::stoi(m[2]) * 60 + std::stoi(m[3]) +
                         std::stoi(m[4]) / 1000.0,
                     std::stoll(m[5]));
  }
  return out;
}

// The coordinator is SIGKILLed and kept down for 4 s (the drill's duration_s). Training does
// not wait for it: the worker's own step timestamps show progress in every second of the
// outage. A server SIGKILLed during the outage, with no coordinator to notice, is declared
// dead by the new coordinator after the takeover grace and rebuilt on the spare; the job
// trains every step and its scrub is clean.
TEST(EndToEndRecovery, ACoordinatorDownForSecondsNeitherStopsTrainingNorMissesAServerDeath) {
  fs::path dir = TempDir("coordinator-down");
  const fs::path job = dir / "out";
  constexpr int kSteps = 2500;
  std::string spec = Spec("coordinator-down", kSteps, 3, 1, 1,
                          "  mode: erasure_code\n  k: 2\n  r: 1\n",
                          "  - {at_step: 150, action: kill_coordinator, duration_s: 4}\n");
  // An evaluation (a step timestamp) every other step: fine enough to see a second without
  // progress even where steps are slow (the sanitizers' build).
  spec.replace(spec.find("eval_every: 0"), 13, "eval_every: 2");
  spec.replace(spec.find("eval_samples: 2048"), 18, "eval_samples: 64");
  const pid_t run = StartRun(dir, spec);
  v1::StatusResponse st;
  int64_t server_pid = 0;
  ASSERT_TRUE(WaitForStatus(dir, job, std::chrono::seconds(120), [&](const auto& s) {
    for (const v1::NodeInfo& n : s.nodes()) {
      if (n.role() == v1::ROLE_SERVER && n.id() == 1 && n.state() == v1::NODE_ACTIVE) {
        server_pid = n.pid();
      }
    }
    return server_pid > 0;
  }, &st)) << ReadFile(dir / "run.log");

  // The outage, as the worker saw it: 1.5 s of its evaluations after it noticed.
  const fs::path worker_log = job / "logs" / "worker-0.log";
  std::string seen;
  size_t noticed = std::string::npos;
  ASSERT_TRUE(PollUntil([&] {
    seen = ReadFile(worker_log);
    noticed = seen.find("the coordinator does not answer");
    if (noticed == std::string::npos) return false;
    const auto during = EvalTimes(seen.substr(noticed));
    return !during.empty() && during.back().first - during.front().first >= 1.5;
  }, std::chrono::seconds(120))) << ReadFile(dir / "run.log") << seen;
  ASSERT_EQ(seen.find("the coordinator answers again"), std::string::npos)
      << "the outage ended before the server could be killed in it:\n" << seen;
  ASSERT_EQ(kill(static_cast<pid_t>(server_pid), SIGKILL), 0);
  const auto during = EvalTimes(seen.substr(noticed));
  for (size_t i = 1; i < during.size(); ++i) {
    EXPECT_LT(during[i].first - during[i - 1].first, 1.0)
        << "no progress for a second while the coordinator was down: steps "
        << during[i - 1].second << " and " << during[i].second << "\n" << seen;
    EXPECT_GT(during[i].second, during[i - 1].second);
  }

  std::string log;
  const std::string report = ExpectCleanEnd(run, dir, kSteps, &log);
  EXPECT_GE(IntField(report, "downtime_s"), 4) << report;
  EXPECT_NE(report.find("\"node\": \"server 1\""), std::string::npos) << report;
  EXPECT_NE(report.find("\"state\": \"recovered\""), std::string::npos) << report;
  const std::string second = ReadFile(job / "logs" / "coordinator-2.log");
  EXPECT_NE(second.find("as term 2"), std::string::npos) << second;
  EXPECT_NE(second.find("server 1"), std::string::npos) << "the new one declared it dead:\n"
                                                        << second;
  fs::remove_all(dir);
}

// The coordinator and a server are SIGKILLed in the same instant (two drills at one step):
// the server's death is noticed by nobody but the new coordinator, which declares it dead and
// has the spare rebuild it; the job trains every step and its scrub is clean.
TEST(EndToEndRecovery, ACoordinatorAndAServerKilledTogetherAreBothRecovered) {
  fs::path dir = TempDir("coordinator-and-server");
  std::string log;
  const std::string report = RunToEnd(
      dir,
      Spec("coordinator-and-server", 600, 3, 1, 1, "  mode: erasure_code\n  k: 2\n  r: 1\n",
           "  - {at_step: 100, action: kill_server, target: 1}\n"
           "  - {at_step: 100, action: kill_coordinator}\n"),
      &log);
  ASSERT_NE(report.find("\"ok\": true"), std::string::npos) << report << log;
  EXPECT_EQ(IntField(report, "steps"), 600) << report;
  EXPECT_NE(report.find("\"scrub\": {\"done\": true, \"clean\": true"), std::string::npos)
      << report;
  EXPECT_NE(report.find("\"state\": \"recovered\""), std::string::npos) << report;
  const std::string second = ReadFile(dir / "out" / "logs" / "coordinator-2.log");
  EXPECT_NE(second.find("as term 2"), std::string::npos) << second;
  EXPECT_NE(second.find("promoted to server 1"), std::string::npos)
      << "the new coordinator did not recover the server:\n" << second << log;
  fs::remove_all(dir);
}

// The pid of the coordinator `ecps run` started into `job` (its --state-dir is there); 0 when
// none runs.
pid_t CoordinatorPid(const fs::path& job) {
  const std::string state_dir = (job / "coordinator-state").string();
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = ReadFile(entry.path() / "cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (cmdline.find(" coordinator ") != std::string::npos &&
        cmdline.find(state_dir) != std::string::npos) {
      return static_cast<pid_t>(std::stol(name));
    }
  }
  return 0;
}

// The coordinator is SIGKILLed while a spare rebuilds a killed server (rebuilds slowed to
// 0.5 MB/s): the new one takes the job over in the recovering phase, the replacement finishes
// its rebuild and reports ACTIVE to it, which closes the failure; the scrub is clean.
TEST(EndToEndRecovery, CoordinatorKilledDuringARebuildTakesTheRebuildOver) {
  fs::path dir = TempDir("coordinator-rebuild");
  const fs::path job = dir / "out";
  const pid_t run = StartRun(
      dir, Spec("coordinator-rebuild", 800, 3, 1, 1,
                "  mode: erasure_code\n  k: 2\n  r: 1\n  rebuild_rate_mb_s: 0.5\n",
                "  - {at_step: 100, action: kill_server, target: 1}\n"));
  v1::StatusResponse st;
  ASSERT_TRUE(WaitForStatus(dir, job, std::chrono::seconds(120), [](const auto& s) {
    for (const v1::NodeInfo& n : s.nodes()) {
      if (n.role() == v1::ROLE_SERVER && n.state() == v1::NODE_RECOVERING) return true;
    }
    return false;
  }, &st)) << ReadFile(dir / "run.log");
  const pid_t coordinator = CoordinatorPid(job);
  ASSERT_GT(coordinator, 0);
  ASSERT_EQ(kill(coordinator, SIGKILL), 0);
  std::string log;
  const std::string report = ExpectCleanEnd(run, dir, 800, &log);
  EXPECT_NE(report.find("\"state\": \"recovered\""), std::string::npos) << report;
  const std::string second = ReadFile(job / "logs" / "coordinator-2.log");
  EXPECT_NE(second.find("as term 2: phase JOB_RECOVERING"), std::string::npos) << second << log;
  EXPECT_NE(second.find("server 1 recovered"), std::string::npos) << second;
  fs::remove_all(dir);
}

// The state log is damaged while the coordinator is down (a byte of its snapshot flipped):
// the new one refuses to take the job over with an error naming the file, and `ecps run`
// fails the job at once rather than starting coordinators that would find the same.
TEST(EndToEndRecovery, ADamagedStateLogFailsTheTakeoverNamingTheFile) {
  fs::path dir = TempDir("coordinator-damaged");
  const pid_t run = StartRun(
      dir, Spec("coordinator-damaged", 100000, 2, 0, 1, "  mode: erasure_code\n  k: 1\n  r: 1\n",
                "  - {at_step: 50, action: kill_coordinator, duration_s: 3}\n"));
  ASSERT_TRUE(PollUntil([&] {
    return ReadFile(dir / "run.log").find("SIGKILL the coordinator") != std::string::npos;
  }, std::chrono::seconds(120))) << ReadFile(dir / "run.log");
  const fs::path snapshot = dir / "out" / "coordinator-state" / "SNAPSHOT";
  {
    std::fstream f(snapshot, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good()) << snapshot;
    f.seekg(40);
    const char byte = static_cast<char>(f.get());
    f.seekp(40);
    f.put(static_cast<char>(byte ^ 0x5a));
  }
  const int status = WaitFor(run, std::chrono::seconds(120));
  const std::string log = ReadFile(dir / "run.log");
  ASSERT_NE(status, -1) << log;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << log;
  EXPECT_NE(log.find("the coordinator cannot take the job over: its saved state is damaged"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find(snapshot.string()), std::string::npos) << log;
  EXPECT_EQ(log.find("restart 2 of"), std::string::npos) << "restarted in vain:\n" << log;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ecps
