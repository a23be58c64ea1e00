// What the end-to-end recovery drills (e2e_recovery_test.cc, e2e_coordinator_recovery_test.cc)
// share: a small job's spec with a `faults:` section, `ecps run` started on it, and the checks
// of how it ended. No sleeps as synchronisation: every wait is on a condition with a deadline.
#ifndef ECPS_TESTS_E2E_RECOVERY_UTIL_H_
#define ECPS_TESTS_E2E_RECOVERY_UTIL_H_

#include <sys/wait.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <string>

#include "gtest/gtest.h"
#include "proto/ecps.pb.h"
#include "tests/ecps_process.h"
#include "tests/job_status.h"

namespace ecps {
namespace testing_process {

inline std::string Spec(const std::string& name, int steps, int servers, int spares, int workers,
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

// Writes `spec` to dir/job.yaml and starts `ecps run` on it, into dir/out with its output in
// dir/run.log; returns its pid.
inline pid_t StartRun(const fs::path& dir, const std::string& spec) {
  std::ofstream(dir / "job.yaml") << spec;
  return Start({"run", (dir / "job.yaml").string(), "--output", (dir / "out").string(),
                "--no-progress"},
               dir / "run.log");
}

// Runs a spec under `ecps run` into dir/out; returns its wait status (-1: not done by the
// deadline), with report.json and the run's log.
inline int RunSpec(const fs::path& dir, const std::string& spec, std::string* report,
            std::string* run_log, std::chrono::seconds deadline) {
  const int status = WaitFor(StartRun(dir, spec), deadline);
  *run_log = ReadFile(dir / "run.log");
  *report = ReadFile(dir / "out" / "report.json");
  return status;
}

// Runs a spec to the end; returns report.json (fails the test when the run did not succeed).
inline std::string RunToEnd(const fs::path& dir, const std::string& spec, std::string* run_log) {
  std::string report;
  const int status = RunSpec(dir, spec, &report, run_log, std::chrono::seconds(240));
  EXPECT_NE(status, -1) << "ecps run did not finish; log:\n" << *run_log;
  EXPECT_TRUE(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0) << *run_log;
  return report;
}

inline int64_t IntField(const std::string& json, const std::string& key) {
  std::smatch m;
  if (!std::regex_search(json, m, std::regex("\"" + key + "\": (-?[0-9]+)"))) return -1;
  return std::stoll(m[1]);
}

// Waits for the `ecps run` that StartRun(dir, ...) started as `run` to end, and expects it
// to succeed after `steps` steps with a clean scrub. Returns report.json, and the run's log.
inline std::string ExpectCleanEnd(pid_t run, const fs::path& dir, int64_t steps, std::string* log) {
  const int status = WaitFor(run, std::chrono::seconds(300));
  *log = ReadFile(dir / "run.log");
  EXPECT_NE(status, -1) << "ecps run did not finish; log:\n" << *log;
  EXPECT_TRUE(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0) << *log;
  const std::string report = ReadFile(dir / "out" / "report.json");
  EXPECT_EQ(IntField(report, "steps"), steps) << report;
  EXPECT_NE(report.find("\"scrub\": {\"done\": true, \"clean\": true"), std::string::npos)
      << report;
  return report;
}

// Polls the job's status until `done` holds (true) or the deadline passes (false).
inline bool WaitForStatus(const fs::path& dir, const fs::path& job, std::chrono::seconds deadline,
                   const std::function<bool(const v1::StatusResponse&)>& done,
                   v1::StatusResponse* last) {
  const auto until = std::chrono::steady_clock::now() + deadline;
  while (std::chrono::steady_clock::now() < until) {
    if (auto st = JobStatus(dir, job); st.has_value()) {
      *last = *st;
      if (done(*st)) return true;
    }
  }
  return false;
}

}  // namespace testing_process
}  // namespace ecps

#endif  // ECPS_TESTS_E2E_RECOVERY_UTIL_H_
