// The online scrub end to end (issue 43): a real job under `ecps run`, its servers started
// with ECPS_FAULT_INJECTION=1, and while it trains the test flips bits in the running servers
// with the InjectFault RPC and the job's admin token (docs/security.md): a data row, a parity
// row and a dense replica. Each is found within a scrub interval or so, the status shows it
// confirmed and repaired (r = 2) or re-derived and counted unlocated (r = 1), and the job
// ends with a clean final scrub and a report whose online_scrub totals count exactly the
// injected corruptions. A job started without ECPS_FAULT_INJECTION refuses the RPC.
//
// No sleeps as synchronisation: every wait is on the job's status or a process exit, with a
// deadline. Every `ecps run` a test starts is stopped when the test ends, also on failure.
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "domain/placement.h"
#include "gtest/gtest.h"
#include "proto/ecps.grpc.pb.h"
#include "proto/ecps.pb.h"
#include "runtime/rpc.h"
#include "runtime/scrub_counters.h"
#include "tests/ecps_process.h"
#include "tests/job_status.h"

namespace ecps {
namespace {

using namespace testing_process;  // NOLINT: TempDir, ReadFile, Start, WaitFor, JobStatus
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr double kScrubIntervalS = 1;
constexpr int kTableRows = 2000;

// A small job: 26 tables of 2,000 rows, a scrub pass every second at most, and steps enough
// that it still trains while the test injects and waits (a few seconds: here the repairs and a
// replacement were done by step 60-130, at about 35 steps a second, with the whole suite
// running beside it); heartbeats often, so that the status follows the servers' counts closely.
std::string Spec(const std::string& name, int servers, int spares, int k, int r, int steps) {
  return absl::StrCat(
      "job:\n  name: ", name, "\n  steps: ", steps,
      "\n  eval_every: 0\n  eval_samples: 256\n  token: e2e-token\n"
      "cluster:\n  servers: ", servers, "\n  spares: ", spares, "\n  workers: 1\n"
      "  heartbeat_interval_ms: 100\n  heartbeat_timeout_ms: 3000\n  rpc_timeout_ms: 5000\n"
      "model:\n  embedding_dim: 8\n  bottom_mlp: [32, 8]\n  top_mlp: [32, 16]\n"
      "  table_rows: ", kTableRows, "\n"
      "optimizer:\n  sparse: {type: adagrad, lr: 0.05}\n  dense: {type: adam, lr: 0.003}\n"
      "data:\n  source: synthetic\n  batch_size: 128\n"
      "fault_tolerance:\n  mode: erasure_code\n  k: ", k, "\n  r: ", r,
      "\n  scrub: {interval_s: ", kScrubIntervalS, ", rate_mb_s: 50}\n"
      "  checkpoint: {save_final: false}\n"
      "monitoring:\n  metrics_interval_ms: 200\n  report_every_steps: 1\n  metrics_port: -1\n");
}

// `ecps run` on a spec in dir/job.yaml, into dir/out, with ECPS_FAULT_INJECTION=1 in the
// environment its roles inherit when `inject` holds. Stopped (SIGTERM, then SIGKILL, which
// takes every role with it) when the test leaves it running, on failure too.
class Job {
 public:
  Job(const fs::path& dir, const std::string& spec, bool inject) : dir_(dir) {
    std::ofstream(dir / "job.yaml") << spec;
    if (inject) setenv("ECPS_FAULT_INJECTION", "1", 1);
    pid_ = Start({"run", (dir / "job.yaml").string(), "--output", out().string(), "--no-progress"},
                 dir / "run.log");
    unsetenv("ECPS_FAULT_INJECTION");
  }
  ~Job() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    WaitFor(pid_, std::chrono::seconds(15));  // SIGKILL past that
  }
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  fs::path out() const { return dir_ / "out"; }
  std::string log() const { return ReadFile(dir_ / "run.log"); }

  // Polls the job's status until `done` holds (true) or `deadline` passes (false); the last
  // status answered is in *last.
  bool WaitForStatus(std::chrono::seconds deadline,
                     const std::function<bool(const v1::StatusResponse&)>& done,
                     v1::StatusResponse* last) const {
    const auto until = Clock::now() + deadline;
    while (Clock::now() < until) {
      if (auto st = JobStatus(dir_, out()); st.has_value()) {
        *last = *st;
        if (done(*st)) return true;
      }
    }
    return false;
  }

  // Waits for `ecps run` to end and returns its exit code (-1: not within the deadline, then
  // it is killed).
  int Finish(std::chrono::seconds deadline) {
    const int status = WaitFor(pid_, deadline);
    pid_ = -1;
    return status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  const fs::path dir_;
  pid_t pid_ = -1;
};

// The server nodes of a status by id (an empty address: not there).
std::string ServerAddress(const v1::StatusResponse& st, int id) {
  for (const v1::NodeInfo& n : st.nodes()) {
    if (n.role() == v1::ROLE_SERVER && n.id() == id) return n.address();
  }
  return "";
}

bool AllServersActive(const v1::StatusResponse& st, int servers) {
  int active = 0;
  for (const v1::NodeInfo& n : st.nodes()) {
    active += n.role() == v1::ROLE_SERVER && n.state() == v1::NODE_ACTIVE;
  }
  return active == servers;
}

// The online scrub's counts summed over the status's servers.
v1::ServerStats ScrubTotals(const v1::StatusResponse& st) {
  v1::ServerStats sum;
  for (const v1::NodeInfo& n : st.nodes()) {
    if (n.role() == v1::ROLE_SERVER) AddScrubCounts(n.server(), &sum);
  }
  AddScrubCounts(st.replaced_servers_scrub(), &sum);
  return sum;
}

// InjectFault on the server at `address`, as an operator holding the admin token calls it.
absl::Status Inject(const std::string& address, const std::string& token,
                    v1::InjectFaultRequest::Target target, int table, int64_t index, int tensor,
                    int64_t bit) {
  auto stub = v1::ParameterServer::NewStub(MakeChannel(address, Role::kServer, nullptr));
  v1::InjectFaultRequest req;
  FillHeader(req.mutable_header(), token, 0, "scrub-e2e-test");
  req.set_target(target);
  req.set_table(table);
  req.set_index(index);
  req.set_tensor(tensor);
  req.set_bit(bit);
  v1::InjectFaultResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  return FromGrpcStatus(stub->InjectFault(&ctx, req, &resp));
}

// The admin token `ecps run` wrote for the operator commands.
std::string AdminToken(const fs::path& out) {
  std::string token = ReadFile(out / "token");
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
  return token;
}

int64_t IntField(const std::string& json, const std::string& object, const std::string& key) {
  std::smatch m;
  const std::regex pattern("\"" + object + "\": \\{[^}]*\"" + key + "\": (-?[0-9]+)");
  if (!std::regex_search(json, m, pattern)) return -1;
  return std::stoll(m[1]);
}

// Waits until the job trains with every server active and returns that status.
v1::StatusResponse Training(const Job& job, int servers) {
  v1::StatusResponse st;
  EXPECT_TRUE(job.WaitForStatus(std::chrono::seconds(60), [&](const v1::StatusResponse& s) {
    return s.phase() == v1::JOB_RUNNING && s.step() >= 20 && AllServersActive(s, servers);
  }, &st)) << "the job did not start training; log:\n" << job.log();
  return st;
}

// After the r = 2 job: its report and logs show the three repairs (the dense replica's on
// `replica_server`) and the recovery.
void ExpectThreeRepairsReported(const Job& job, int replica_server) {
  const std::string report = ReadFile(job.out() / "report.json");
  EXPECT_NE(report.find("\"ok\": true"), std::string::npos) << report;
  EXPECT_NE(report.find("\"scrub\": {\"done\": true, \"clean\": true"), std::string::npos)
      << report;
  EXPECT_NE(report.find("\"state\": \"recovered\""), std::string::npos) << report;
  EXPECT_EQ(IntField(report, "online_scrub", "mismatches_confirmed"), 3) << report;
  EXPECT_EQ(IntField(report, "online_scrub", "repaired"), 3) << report;
  EXPECT_EQ(IntField(report, "online_scrub", "unlocated"), 0) << report;
  EXPECT_GT(IntField(report, "online_scrub", "dense_checked"), 0) << report;
  EXPECT_NE(job.log().find("online scrub found 3 corrupt stripes or dense replicas: 3 repaired"),
            std::string::npos)
      << job.log();
  // Each server that held a flip says so in its log.
  EXPECT_NE(ReadFile(job.out() / "logs" / absl::StrCat("server-", replica_server, ".log"))
                .find("dense replica of tensor 1 differed"),
            std::string::npos);
}

// r = 2 locates the bad member: a flipped data row, a flipped parity row and a flipped dense
// replica are each confirmed once and rewritten, while training goes on.
TEST(ScrubEndToEnd, TwoParityRowsRepairADataRowAParityRowAndADenseReplicaWhileTraining) {
  constexpr int kServers = 4, kK = 2, kR = 2, kSteps = 1500;
  const fs::path dir = TempDir("scrub-r2");
  Job job(dir, Spec("scrub-r2", kServers, /*spares=*/1, kK, kR, kSteps), /*inject=*/true);
  const v1::StatusResponse running = Training(job, kServers);
  ASSERT_FALSE(HasFailure());
  const std::string token = AdminToken(job.out());
  ASSERT_FALSE(token.empty());
  auto placement = Placement::Create(kServers, kK, kR, std::vector<int64_t>(26, kTableRows));
  ASSERT_TRUE(placement.ok()) << placement.status();

  // Table 0: data row 1 of stripe 10, parity 0 of stripe 20; dense tensor 1 (primary on
  // server 1) on its first replica's server (DenseStore: the next server).
  const int64_t row = 10 * kK + 1;
  const int data_server = placement->DataLocation(0, row).server;
  const int parity_server = placement->ParityLocation(0, 20, 0).server;
  const int replica_server = (1 + 1) % kServers;
  const auto injected = Clock::now();
  ASSERT_TRUE(Inject(ServerAddress(running, data_server), token, v1::InjectFaultRequest::DATA_ROW,
                     0, row, 0, 20).ok());
  ASSERT_TRUE(Inject(ServerAddress(running, parity_server), token,
                     v1::InjectFaultRequest::PARITY_ROW, 0, 20, 0, 7).ok());
  ASSERT_TRUE(Inject(ServerAddress(running, replica_server), token,
                     v1::InjectFaultRequest::DENSE_WEIGHTS, 0, 0, /*tensor=*/1, 3).ok());

  // Found and repaired while the job trains: the status shows all three repaired.
  v1::StatusResponse st;
  const bool repaired = job.WaitForStatus(std::chrono::seconds(30), [](const auto& s) {
    return ScrubTotals(s).scrub_repaired() >= 3;
  }, &st);
  const double seconds = std::chrono::duration<double>(Clock::now() - injected).count();
  ASSERT_TRUE(repaired) << ScrubTotals(st).DebugString() << job.log();
  std::printf("r = 2: three corruptions repaired %.2f s after the injection (scrub interval "
              "%.0f s), at step %lld of %d\n",
              seconds, kScrubIntervalS, static_cast<long long>(st.step()), kSteps);
  std::fflush(stdout);  // before the next fork: a child's freopen would flush it again
  EXPECT_EQ(st.phase(), v1::JOB_RUNNING) << "repaired only after training ended";
  const v1::ServerStats now = ScrubTotals(st);
  EXPECT_EQ(now.scrub_mismatches_confirmed(), 3) << now.DebugString();
  EXPECT_EQ(now.scrub_unlocated(), 0);

  // The server that repaired the parity row and the dense replica dies and the spare takes
  // its place: its counts leave the status's nodes, and the coordinator keeps them.
  int64_t repairer_pid = 0;
  int64_t repairer_repaired = 0;
  for (const v1::NodeInfo& n : st.nodes()) {
    if (n.role() == v1::ROLE_SERVER && n.id() == replica_server) {
      repairer_pid = n.pid();
      repairer_repaired = n.server().scrub_repaired();
    }
  }
  ASSERT_GT(repairer_pid, 0);
  ASSERT_EQ(repairer_repaired, 2) << "server " << replica_server << " is the first parity "
                                  << "holder of stripe 20 and holds the dense replica";
  ASSERT_EQ(kill(static_cast<pid_t>(repairer_pid), SIGKILL), 0);
  ASSERT_TRUE(job.WaitForStatus(std::chrono::seconds(60), [&](const auto& s) {
    return s.failures_size() == 1 && s.failures(0).state() == v1::FAILURE_RECOVERED;
  }, &st)) << st.DebugString() << job.log();
  std::printf("r = 2: server %d SIGKILLed and rebuilt on the spare by step %lld\n",
              replica_server, static_cast<long long>(st.step()));
  std::fflush(stdout);
  EXPECT_EQ(st.replaced_servers_scrub().scrub_repaired(), 2) << st.DebugString();
  EXPECT_EQ(ScrubTotals(st).scrub_mismatches_confirmed(), 3) << ScrubTotals(st).DebugString();
  EXPECT_EQ(st.phase(), v1::JOB_RUNNING) << "recovered only after training ended";

  ASSERT_EQ(job.Finish(std::chrono::seconds(300)), 0) << job.log();
  ExpectThreeRepairsReported(job, replica_server);
  fs::remove_all(dir);
}

// r = 1 cannot say which member flipped: a flipped data row is detected, counted unlocated,
// and the parity re-derived from it, so the final scrub is clean.
TEST(ScrubEndToEnd, OneParityRowDetectsADataRowFlipAndReDerivesTheParity) {
  constexpr int kServers = 3, kK = 2, kR = 1, kSteps = 1000;
  const fs::path dir = TempDir("scrub-r1");
  Job job(dir, Spec("scrub-r1", kServers, /*spares=*/0, kK, kR, kSteps), /*inject=*/true);
  const v1::StatusResponse running = Training(job, kServers);
  ASSERT_FALSE(HasFailure());
  const std::string token = AdminToken(job.out());
  auto placement = Placement::Create(kServers, kK, kR, std::vector<int64_t>(26, kTableRows));
  ASSERT_TRUE(placement.ok()) << placement.status();
  const int64_t row = 40 * kK;
  ASSERT_TRUE(Inject(ServerAddress(running, placement->DataLocation(0, row).server), token,
                     v1::InjectFaultRequest::DATA_ROW, 0, row, 0, 20).ok());

  v1::StatusResponse st;
  ASSERT_TRUE(job.WaitForStatus(std::chrono::seconds(30), [](const auto& s) {
    return ScrubTotals(s).scrub_unlocated() >= 1;
  }, &st)) << ScrubTotals(st).DebugString() << job.log();
  EXPECT_EQ(st.phase(), v1::JOB_RUNNING) << "found only after training ended";
  std::printf("r = 1: the flip found and the parity re-derived by step %lld of %d\n",
              static_cast<long long>(st.step()), kSteps);
  std::fflush(stdout);

  ASSERT_EQ(job.Finish(std::chrono::seconds(300)), 0) << job.log();
  const std::string report = ReadFile(job.out() / "report.json");
  EXPECT_NE(report.find("\"ok\": true"), std::string::npos) << report;
  EXPECT_NE(report.find("\"scrub\": {\"done\": true, \"clean\": true"), std::string::npos)
      << report;
  EXPECT_EQ(IntField(report, "online_scrub", "mismatches_confirmed"), 1) << report;
  EXPECT_EQ(IntField(report, "online_scrub", "unlocated"), 1) << report;
  EXPECT_EQ(IntField(report, "online_scrub", "repaired"), 0) << report;
  fs::remove_all(dir);
}

// A production server (started without ECPS_FAULT_INJECTION=1) refuses the RPC, even with
// the admin token, changes nothing, and counts the refusal; the job ends clean.
TEST(ScrubEndToEnd, AServerStartedWithoutFaultInjectionRefusesIt) {
  constexpr int kServers = 3;
  const fs::path dir = TempDir("scrub-off");
  Job job(dir, Spec("scrub-off", kServers, /*spares=*/0, 2, 1, 600), /*inject=*/false);
  const v1::StatusResponse running = Training(job, kServers);
  ASSERT_FALSE(HasFailure());
  const absl::Status refused = Inject(ServerAddress(running, 0), AdminToken(job.out()),
                                      v1::InjectFaultRequest::DATA_ROW, 0, 0, 0, 20);
  EXPECT_TRUE(absl::IsFailedPrecondition(refused)) << refused;
  std::printf("refused at step %lld\n", static_cast<long long>(running.step()));
  std::fflush(stdout);
  EXPECT_NE(refused.message().find("ECPS_FAULT_INJECTION=1"), std::string::npos) << refused;
  v1::StatusResponse st;
  EXPECT_TRUE(job.WaitForStatus(std::chrono::seconds(30), [](const auto& s) {
    for (const v1::NodeInfo& n : s.nodes()) {
      if (n.role() == v1::ROLE_SERVER && n.id() == 0) return n.server().refused_requests() >= 1;
    }
    return false;
  }, &st)) << st.DebugString();

  ASSERT_EQ(job.Finish(std::chrono::seconds(300)), 0) << job.log();
  const std::string report = ReadFile(job.out() / "report.json");
  EXPECT_NE(report.find("\"scrub\": {\"done\": true, \"clean\": true"), std::string::npos)
      << report;
  EXPECT_EQ(IntField(report, "online_scrub", "mismatches_confirmed"), 0) << report;
  EXPECT_EQ(ReadFile(job.out() / "logs" / "server-0.log").find("fault injected"),
            std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ecps
