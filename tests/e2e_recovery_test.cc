// End-to-end recovery drills: `ecps run` with a `faults:` section, real processes and real
// signals. A killed worker is restarted and its partition continues; a server stopped past the
// heartbeat timeout is fenced when it wakes, and the job still ends with a clean scrub; a
// killed server is replaced by the spare and rebuilt online.
//
// No sleeps as synchronisation: every wait is on a condition (a process exit) with a deadline.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "gtest/gtest.h"
#include "tests/ecps_process.h"

namespace ecps {
namespace {

using namespace testing_process;  // NOLINT: TempDir, ReadFile, Start, WaitFor
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string Spec(const std::string& name, int steps, int servers, int spares, int workers,
                 const std::string& fault_tolerance, const std::string& faults) {
  return "job:\n  name: " + name + "\n  steps: " + std::to_string(steps) +
         "\n  eval_every: 0\n  eval_samples: 2048\n  token: e2e-token\n"
         "cluster:\n  servers: " + std::to_string(servers) + "\n  spares: " +
         std::to_string(spares) + "\n  workers: " + std::to_string(workers) +
         "\n  heartbeat_interval_ms: 100\n  heartbeat_timeout_ms: 1000\n"
         "  rpc_timeout_ms: 5000\n"
         "model:\n  embedding_dim: 8\n  bottom_mlp: [32, 8]\n  top_mlp: [32, 16]\n"
         "  table_rows: 2000\n"
         "optimizer:\n  sparse: {type: adagrad, lr: 0.05}\n  dense: {type: adam, lr: 0.003}\n"
         "data:\n  source: synthetic\n  batch_size: 128\n"
         "fault_tolerance:\n" + fault_tolerance +
         "faults:\n" + faults +
         "monitoring:\n  metrics_interval_ms: 100\n  report_every_steps: 1\n";
}

// Runs a spec to the end; returns report.json (fails the test when the run did not succeed).
std::string RunToEnd(const fs::path& dir, const std::string& spec, std::string* run_log) {
  std::ofstream(dir / "job.yaml") << spec;
  pid_t pid = Start({"run", (dir / "job.yaml").string(), "--output", (dir / "out").string(),
                     "--no-progress"},
                    dir / "run.log");
  const int status = WaitFor(pid, std::chrono::seconds(240));
  *run_log = ReadFile(dir / "run.log");
  EXPECT_NE(status, -1) << "ecps run did not finish; log:\n" << *run_log;
  EXPECT_TRUE(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0) << *run_log;
  return ReadFile(dir / "out" / "report.json");
}

int64_t IntField(const std::string& json, const std::string& key) {
  std::smatch m;
  if (!std::regex_search(json, m, std::regex("\"" + key + "\": (-?[0-9]+)"))) return -1;
  return std::stoll(m[1]);
}

TEST(EndToEndRecovery, KilledWorkerIsRestartedAndItsPartitionTrainsEverySample) {
  fs::path dir = TempDir("worker");
  constexpr int kSteps = 300, kBatch = 128, kWorkers = 2;
  std::string log;
  const std::string report = RunToEnd(
      dir,
      Spec("kill-worker", kSteps, 2, 0, kWorkers, "  mode: none\n",
           "  - {at_step: 100, action: kill_worker, target: 1}\n"),
      &log);
  ASSERT_NE(report.find("\"ok\": true"), std::string::npos) << report << log;
  // Every sample each worker was configured for was trained (a replacement may train a few
  // steps twice: those after the dead worker's last report).
  EXPECT_GE(IntField(report, "samples"), int64_t{kSteps} * kBatch * kWorkers) << report;
  EXPECT_EQ(IntField(report, "steps"), kSteps) << report;
  EXPECT_NE(log.find("drill at step"), std::string::npos) << log;
  EXPECT_NE(log.find("SIGKILL worker 1"), std::string::npos) << log;
  EXPECT_NE(log.find("started a replacement worker 1"), std::string::npos) << log;
  EXPECT_NE(report.find("\"node\": \"worker 1\""), std::string::npos) << report;
  EXPECT_NE(report.find("\"state\": \"recovered\""), std::string::npos) << report;
  // The replacement resumed where the dead worker left off, not from its first sample.
  const std::string replacement = ReadFile(dir / "out" / "logs" / "worker-1-r1.log");
  EXPECT_NE(replacement.find("resuming after step"), std::string::npos) << replacement;
  EXPECT_NE(ReadFile(dir / "out" / "metrics.csv").find("drill"), std::string::npos);
  fs::remove_all(dir);
}

TEST(EndToEndRecovery, ServerStoppedPastTheTimeoutIsFencedAndTheJobEndsClean) {
  fs::path dir = TempDir("stop");
  std::string log;
  const std::string report = RunToEnd(
      dir,
      Spec("stop-server", 400, 3, 1, 1, "  mode: erasure_code\n  k: 2\n  r: 1\n",
           "  - {at_step: 100, action: stop_server, target: 1, duration_s: 3}\n"),
      &log);
  ASSERT_NE(report.find("\"ok\": true"), std::string::npos) << report << log;
  EXPECT_NE(report.find("\"scrub\": {\"done\": true, \"clean\": true"), std::string::npos)
      << report;
  EXPECT_NE(log.find("SIGSTOP server 1"), std::string::npos) << log;
  EXPECT_NE(log.find("SIGCONT server 1"), std::string::npos) << log;
  EXPECT_NE(report.find("\"node\": \"server 1\""), std::string::npos) << report;
  EXPECT_NE(report.find("\"by_spare\": true"), std::string::npos) << report;
  EXPECT_NE(report.find("\"state\": \"recovered\""), std::string::npos) << report;
  // The woken process learnt it was fenced and exited on its own (before the job ended).
  const std::string old_server = ReadFile(dir / "out" / "logs" / "server-1.log");
  EXPECT_NE(old_server.find("fenced"), std::string::npos) << old_server;
  EXPECT_NE(log.find("server-1 exited (exit 1)"), std::string::npos) << log;
  fs::remove_all(dir);
}

TEST(EndToEndRecovery, KilledServerIsReplacedBySpareAndRebuiltOnline) {
  fs::path dir = TempDir("kill");
  std::string log;
  const std::string report = RunToEnd(
      dir,
      Spec("kill-server", 400, 3, 1, 1, "  mode: erasure_code\n  k: 2\n  r: 1\n",
           "  - {at_step: 150, action: kill_server, target: 2}\n"),
      &log);
  ASSERT_NE(report.find("\"ok\": true"), std::string::npos) << report << log;
  EXPECT_NE(report.find("\"scrub\": {\"done\": true, \"clean\": true"), std::string::npos)
      << report;
  EXPECT_NE(report.find("\"node\": \"server 2\""), std::string::npos) << report;
  EXPECT_NE(report.find("\"state\": \"recovered\""), std::string::npos) << report;
  EXPECT_NE(log.find("recovered in"), std::string::npos) << log;
  EXPECT_NE(log.find("throughput during recovery"), std::string::npos) << log;
  fs::remove_all(dir);
}

TEST(EndToEndRecovery, KilledServerWithoutSpareGetsANewProcess) {
  fs::path dir = TempDir("restart");
  std::string log;
  const std::string report = RunToEnd(
      dir,
      Spec("restart-server", 400, 3, 0, 1, "  mode: erasure_code\n  k: 2\n  r: 1\n",
           "  - {at_step: 150, action: kill_server, target: 0}\n"),
      &log);
  ASSERT_NE(report.find("\"ok\": true"), std::string::npos) << report << log;
  EXPECT_NE(log.find("started a replacement server 0"), std::string::npos) << log;
  EXPECT_NE(report.find("\"by_spare\": false"), std::string::npos) << report;
  EXPECT_NE(report.find("\"scrub\": {\"done\": true, \"clean\": true"), std::string::npos)
      << report;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ecps
