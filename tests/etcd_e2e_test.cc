// Standby coordinators with the state in etcd (label etcd), end to end: a real three-member
// etcd started here, `ecps run` with coordinator.replicas 2. The active coordinator SIGKILLed
// mid-job: a standby serves, as a higher term, and the job ends clean (how fast is
// bench/standby_takeover.sh's to measure, not a test's). One etcd
// member SIGKILLed mid-job: the coordinator keeps its lead and training goes on. Skipped,
// saying so, where etcd is not installed (deploy/setup.sh --tests installs it).
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "gtest/gtest.h"
#include "absl/strings/match.h"
#include "proto/ecps.pb.h"
#include "runtime/security.h"
#include "tests/ecps_process.h"
#include "tests/etcd_cluster.h"
#include "tests/job_status.h"
#include "tests/poll.h"

namespace ecps {
namespace {

using namespace testing_process;  // NOLINT: TempDir, ReadFile, Start, WaitFor, EtcdCluster
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string Spec(const std::string& name, int steps, const std::string& endpoints, int ttl_s) {
  return "job:\n  name: " + name + "\n  steps: " + std::to_string(steps) +
         "\n  eval_every: 0\n  eval_samples: 2048\n  token: e2e-token\n"
         "cluster:\n  servers: 3\n  workers: 1\n"
         "  heartbeat_interval_ms: 100\n  heartbeat_timeout_ms: 1000\n  rpc_timeout_ms: 5000\n"
         "coordinator:\n  replicas: 2\n  state_store: etcd\n  etcd_endpoints: [" + endpoints +
         "]\n  lease_ttl_s: " + std::to_string(ttl_s) + "\n"
         "model:\n  embedding_dim: 8\n  bottom_mlp: [32, 8]\n  top_mlp: [32, 16]\n"
         "  table_rows: 2000\n"
         "optimizer:\n  sparse: {type: adagrad, lr: 0.05}\n  dense: {type: adam, lr: 0.003}\n"
         "data:\n  source: synthetic\n  batch_size: 128\n"
         "fault_tolerance:\n  mode: erasure_code\n  k: 2\n  r: 1\n"
         "monitoring:\n  metrics_interval_ms: 100\n  report_every_steps: 1\n";
}

int64_t IntField(const std::string& json, const std::string& key) {
  std::smatch m;
  if (!std::regex_search(json, m, std::regex("\"" + key + "\": (-?[0-9]+)"))) return -1;
  return std::stoll(m[1]);
}

// The first line of `path` ("" when there is none yet).
std::string FirstLine(const fs::path& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// The pid of the live coordinator of job folder `job` listening on `port` (-1: none).
pid_t CoordinatorOnPort(const fs::path& job, const std::string& port) {
  for (const std::string& p : ProcessesMentioning((job / "coordinator.port").string())) {
    if (p.find(" coordinator ") == std::string::npos) continue;
    if (p.find(" --port " + port + " ") == std::string::npos) continue;
    return static_cast<pid_t>(std::stol(p.substr(0, p.find(':'))));
  }
  return -1;
}

// Every log of the job's coordinators, one after another.
std::string CoordinatorLogs(const fs::path& job) {
  std::string all;
  for (const auto& entry : fs::directory_iterator(job / "logs")) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("coordinator", 0) == 0) all += "== " + name + "\n" + ReadFile(entry.path());
  }
  return all;
}

class EtcdEndToEnd : public ::testing::Test {
 protected:
  void SetUp() override {
    if (EtcdBinary().empty()) {
      GTEST_SKIP() << "etcd is not installed (deploy/setup.sh --tests installs Debian's "
                      "etcd-server and etcd-client)";
    }
    dir_ = TempDir("etcd_e2e");
    if (TlsWanted()) {
      // The job's certificates (tests/tls/make_certs.sh): etcd serves TLS with its own and
      // asks every client for one of the job's CA.
      const fs::path certs = dir_ / "certs";
      ASSERT_EQ(std::system(("bash " + std::string(ECPS_SOURCE_DIR) + "/tests/tls/make_certs.sh " +
                             certs.string() + " >/dev/null 2>&1").c_str()), 0);
      auto admin = LoadTlsIdentity(TlsFiles{(certs / "ca.pem").string(),
                                            (certs / "admin.pem").string(),
                                            (certs / "admin.key").string()},
                                   Role::kAdmin);
      ASSERT_TRUE(admin.ok()) << admin.status();
      admin_ = *std::move(admin);
      etcd_.UseTls((certs / "ca.pem").string(), (certs / "etcd.pem").string(),
                   (certs / "etcd.key").string(), &admin_);
    }
    ASSERT_EQ(etcd_.Start(3, dir_ / "etcd"), "");
  }
  // Whether this test's etcd speaks TLS (the TLS test's name says so).
  static bool TlsWanted() {
    return absl::StrContains(::testing::UnitTest::GetInstance()->current_test_info()->name(),
                             "Tls");
  }
  void TearDown() override {
    // The run (and with it every role) goes first, also when an assertion failed.
    if (run_ > 0) {
      kill(run_, SIGTERM);
      if (WaitFor(run_, std::chrono::seconds(20)) == -1) ADD_FAILURE() << "ecps run hung";
      run_ = -1;
    }
    // A failed test leaves its folder (logs) behind; a passed one does not.
    if (!HasFailure() && !dir_.empty()) {
      etcd_.StopAll();
      fs::remove_all(dir_);
    }
  }

  void StartRun(const std::string& spec) {
    std::ofstream(dir_ / "job.yaml") << spec;
    run_ = Start({"run", (dir_ / "job.yaml").string(), "--output", (dir_ / "out").string(),
                  "--no-progress"},
                 dir_ / "run.log");
  }

  // Waits for the run to end cleanly after `steps` steps; returns report.json.
  std::string ExpectCleanEnd(int64_t steps) {
    const int status = WaitFor(run_, std::chrono::seconds(240));
    run_ = -1;
    const std::string log = ReadFile(dir_ / "run.log");
    EXPECT_TRUE(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0) << log;
    const std::string report = ReadFile(dir_ / "out" / "report.json");
    EXPECT_EQ(IntField(report, "steps"), steps) << report << log;
    EXPECT_NE(report.find("\"scrub\": {\"done\": true, \"clean\": true"), std::string::npos)
        << report;
    return report;
  }

  // Waits until the job has taken `step` steps.
  void WaitForStep(int64_t step) {
    v1::StatusResponse last;
    ASSERT_TRUE(PollUntil(
        [&] {
          auto st = JobStatus(dir_, dir_ / "out");
          if (st.has_value()) last = *st;
          return st.has_value() && st->step() >= step;
        },
        std::chrono::seconds(120)))
        << "step " << last.step() << "; " << ReadFile(dir_ / "run.log");
  }

  fs::path dir_;
  TlsIdentity admin_;
  EtcdCluster etcd_;
  pid_t run_ = -1;
};

TEST_F(EtcdEndToEnd, AStandbyServesAfterTheActiveCoordinatorsDeath) {
  const fs::path job = dir_ / "out";
  StartRun(Spec("etcd-standby", 600, etcd_.endpoint_list(), 1));
  WaitForStep(100);
  const std::string port = FirstLine(job / "coordinator.port");
  const pid_t active = CoordinatorOnPort(job, port);
  ASSERT_GT(active, 0) << "no coordinator on port " << port;
  const auto killed = Clock::now();
  ASSERT_EQ(kill(active, SIGKILL), 0);

  // Another coordinator took the lead (it wrote its port: the standby's, or that of the new
  // standby `ecps run` started on the dead one's port, whichever won) and answers the job's
  // status. Only a leader listens.
  ASSERT_TRUE(PollUntil(
      [&] {
        const pid_t leader = CoordinatorOnPort(job, FirstLine(job / "coordinator.port"));
        return leader > 0 && leader != active && JobStatus(dir_, job).has_value();
      },
      std::chrono::seconds(10)))
      << CoordinatorLogs(job);
  const double serving_s = std::chrono::duration<double>(Clock::now() - killed).count();
  // The figure bench/standby_takeover.sh takes its median of; a timed assertion here failed
  // at 3.4 s under the sanitizers beside other suites.
  std::printf("a standby serves %.2f s after the active coordinator's SIGKILL\n", serving_s);
  EXPECT_NE(CoordinatorLogs(job).find("over as term 2"), std::string::npos)
      << CoordinatorLogs(job);

  const std::string report = ExpectCleanEnd(600);
  EXPECT_NE(ReadFile(dir_ / "run.log").find("the active coordinator (pid " +
                                            std::to_string(active) + ") died"),
            std::string::npos)
      << ReadFile(dir_ / "run.log");
}

TEST_F(EtcdEndToEnd, AnEtcdMemberKilledMidJobChangesNothing) {
  const fs::path job = dir_ / "out";
  // A TTL well above etcd's re-election (500 ms here) when the member was its raft leader.
  StartRun(Spec("etcd-member", 500, etcd_.endpoint_list(), 5));
  WaitForStep(100);
  // The first endpoint: the member every client talks to first.
  etcd_.Kill(0);
  WaitForStep(250);
  const std::string report = ExpectCleanEnd(500);
  // No node was declared dead meanwhile (a coordinator stalled on etcd would miss heartbeats).
  EXPECT_NE(report.find("\"failures\": []"), std::string::npos) << report;
  const std::string logs = CoordinatorLogs(job);
  EXPECT_EQ(logs.find("no longer leads"), std::string::npos) << logs;
  EXPECT_EQ(logs.find("over as term"), std::string::npos) << logs;
}

// With security.tls the coordinators speak mutual TLS to etcd too (their own certificate,
// etcd's checked against the job's CA), as the launcher does when it clears an earlier run's
// keys (the admin's); an etcd that asks every client for a certificate of the job's CA serves
// the job, whose active coordinator is then SIGKILLed: the standby takes over through TLS.
TEST_F(EtcdEndToEnd, OverTlsTheStateAndTheElectionWorkAsInPlaintext) {
  const fs::path certs = dir_ / "certs";
  std::string spec = Spec("etcd-tls", 400, etcd_.endpoint_list(), 1);
  spec += "security:\n  tls:\n    ca: " + (certs / "ca.pem").string() + "\n";
  for (const char* role : {"coordinator", "server", "worker", "admin"}) {
    spec += std::string("    ") + role + ": {cert: " + (certs / role).string() + ".pem, key: " +
            (certs / role).string() + ".key}\n";
  }
  StartRun(spec);
  WaitForStep(100);
  const fs::path job = dir_ / "out";
  const pid_t active = CoordinatorOnPort(job, FirstLine(job / "coordinator.port"));
  ASSERT_GT(active, 0) << CoordinatorLogs(job);
  ASSERT_EQ(kill(active, SIGKILL), 0);
  ExpectCleanEnd(400);
  const std::string logs = CoordinatorLogs(job);
  EXPECT_NE(logs.find("over as term 2"), std::string::npos) << logs;
}

}  // namespace
}  // namespace ecps
