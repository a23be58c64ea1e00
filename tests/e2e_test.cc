// End-to-end: `ecps run` starts real processes (coordinator, servers, workers) on loopback,
// trains, and reports; Ctrl-C leaves no process behind; a bad spec starts nothing.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "gtest/gtest.h"
#include "proto/ecps.grpc.pb.h"
#include "runtime/rpc.h"
#include "tests/ecps_process.h"

namespace ecps {
namespace {

using namespace testing_process;  // NOLINT: TempDir, ReadFile, Start, WaitFor, ...
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string Spec(const std::string& name, int steps, int workers, const std::string& extra = "",
                 int servers = 2) {
  return "job:\n  name: " + name + "\n  steps: " + std::to_string(steps) +
         "\n  eval_every: 0\n  eval_samples: 8192\n  token: e2e-token\n"
         "cluster:\n  servers: " + std::to_string(servers) + "\n  workers: " +
         std::to_string(workers) +
         "\n  heartbeat_interval_ms: 100\n"
         "model:\n  embedding_dim: 8\n  bottom_mlp: [32, 8]\n  top_mlp: [32, 16]\n"
         "  table_rows: 2000\n"
         "optimizer:\n  sparse: {type: adagrad, lr: 0.05}\n  dense: {type: adam, lr: 0.003}\n"
         "data:\n  source: synthetic\n  batch_size: 256\n"
         "monitoring:\n  metrics_interval_ms: 200\n" + extra;
}

TEST(EndToEnd, TrainsToUsefulAucWithRealProcesses) {
  fs::path dir = TempDir("converge");
  std::ofstream(dir / "job.yaml") << Spec("converge", 600, 2);
  pid_t pid = Start({"run", (dir / "job.yaml").string(), "--output", (dir / "out").string(),
                     "--no-progress"},
                    dir / "run.log");
  int status = WaitFor(pid, std::chrono::seconds(240));
  ASSERT_NE(status, -1) << "ecps run did not finish; log:\n" << ReadFile(dir / "run.log");
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << ReadFile(dir / "run.log");
  std::string report = ReadFile(dir / "out" / "report.json");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(report, m, std::regex("\"eval_auc\": ([0-9.]+)"))) << report;
  double auc = std::stod(m[1]);
  EXPECT_GE(auc, 0.70) << report;
  EXPECT_NE(report.find("\"ok\": true"), std::string::npos);
  // The metrics timeline has a row per interval with progress.
  std::string csv = ReadFile(dir / "out" / "metrics.csv");
  EXPECT_NE(csv.find("running"), std::string::npos);
  EXPECT_NE(csv.find("finished"), std::string::npos);
  fs::remove_all(dir);
}

TEST(EndToEnd, ErasureCodedJobEndsWithACleanScrub) {
  fs::path dir = TempDir("ec");
  std::ofstream(dir / "job.yaml") << Spec(
      "ec", 150, 2, "fault_tolerance:\n  mode: erasure_code\n  k: 2\n  r: 1\n", 3);
  pid_t pid = Start({"run", (dir / "job.yaml").string(), "--output", (dir / "out").string(),
                     "--no-progress"},
                    dir / "run.log");
  int status = WaitFor(pid, std::chrono::seconds(240));
  ASSERT_NE(status, -1) << ReadFile(dir / "run.log");
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << ReadFile(dir / "run.log");
  std::string report = ReadFile(dir / "out" / "report.json");
  EXPECT_NE(report.find("\"scrub\": {\"done\": true, \"clean\": true"), std::string::npos)
      << report;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(report, m, std::regex("\"stripes_checked\": ([0-9]+)")));
  EXPECT_EQ(std::stoll(m[1]), 26 * 1000);  // 26 tables of 2000 rows in stripes of 2
  fs::remove_all(dir);
}

// A worker process whose GEMM is corrupted (the fault seam: ECPS_GEMM_FAULTS, honoured with
// ECPS_FAULT_INJECTION=1) detects it, computes the step again and pushes only what passed: the
// job ends with the fault-free job's model (the same evaluation, to the last digit) and the
// detection counted in its report.
TEST(EndToEnd, ACorruptedGemmInAWorkerIsDetectedAndItsStepComputedAgain) {
  fs::path dir = TempDir("abft");
  std::ofstream(dir / "job.yaml") << Spec("abft", 60, 1, "worker:\n  abft: detect\n");
  auto run = [&](const std::string& out) {
    pid_t pid = Start({"run", (dir / "job.yaml").string(), "--output", (dir / out).string(),
                       "--no-progress"},
                      dir / (out + ".log"));
    const int status = WaitFor(pid, std::chrono::seconds(240));
    EXPECT_TRUE(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << ReadFile(dir / (out + ".log"));
    return ReadFile(dir / out / "report.json");
  };
  const std::string clean = run("clean");
  // Bit 30 of an element of the second bottom layer's weight gradient (site 3 * 1 + 1), on its
  // 20th run: a value of 2^64 or more, which would wreck the model if it were pushed.
  setenv("ECPS_FAULT_INJECTION", "1", 1);
  setenv("ECPS_GEMM_FAULTS", "4:20:30", 1);
  const std::string faulty = run("faulty");
  unsetenv("ECPS_GEMM_FAULTS");
  unsetenv("ECPS_FAULT_INJECTION");
  EXPECT_NE(clean.find("\"abft_detections\": 0"), std::string::npos) << clean;
  EXPECT_NE(faulty.find("\"abft_detections\": 1"), std::string::npos) << faulty;
  EXPECT_NE(faulty.find("\"ok\": true"), std::string::npos) << faulty;
  std::smatch a, b;
  ASSERT_TRUE(std::regex_search(clean, a, std::regex("\"eval_auc\": ([0-9.]+)"))) << clean;
  ASSERT_TRUE(std::regex_search(faulty, b, std::regex("\"eval_auc\": ([0-9.]+)"))) << faulty;
  EXPECT_EQ(a[1], b[1]);
  EXPECT_NE(ReadFile(dir / "faulty" / "logs" / "worker-0.log").find("GEMM faults 4:20:30"),
            std::string::npos);
  EXPECT_NE(ReadFile(dir / "faulty" / "logs" / "worker-0.log").find("computed again"),
            std::string::npos);
  fs::remove_all(dir);
}

// Asks the coordinator for the pids of every node of the job.
std::vector<int64_t> NodePids(const std::string& address) {
  auto stub = v1::Coordinator::NewStub(MakeChannel(address, Role::kCoordinator));
  v1::StatusRequest req;
  FillHeader(req.mutable_header(), "e2e-token", 0, "test");
  v1::StatusResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  std::vector<int64_t> pids;
  if (!stub->Status(&ctx, req, &resp).ok()) return pids;
  for (const auto& n : resp.nodes()) {
    if (n.pid() > 0) pids.push_back(n.pid());
  }
  return pids;
}

TEST(EndToEnd, SigintLeavesNoProcessBehind) {
  fs::path dir = TempDir("sigint");
  std::ofstream(dir / "job.yaml") << Spec("sigint", 1000000, 1);
  pid_t pid = Start({"run", (dir / "job.yaml").string(), "--output", (dir / "out").string(),
                     "--no-progress"},
                    dir / "run.log");
  // Wait until training runs: every node registered (1 coordinator-less: 2 servers, 1 worker).
  std::vector<int64_t> pids;
  auto deadline = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() < deadline) {
    std::ifstream port_file(dir / "out" / "coordinator.port");
    int port = 0;
    if (port_file >> port && port > 0) {
      pids = NodePids("127.0.0.1:" + std::to_string(port));
      if (pids.size() == 3 && ReadFile(dir / "out" / "metrics.csv").find("running") !=
                                  std::string::npos) {
        break;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(pids.size(), 3u) << ReadFile(dir / "run.log");
  ASSERT_EQ(kill(pid, SIGINT), 0);
  int status = WaitFor(pid, std::chrono::seconds(30));
  ASSERT_NE(status, -1) << "launcher did not exit after SIGINT";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 130) << ReadFile(dir / "run.log");
  for (int64_t p : pids) {
    EXPECT_EQ(kill(static_cast<pid_t>(p), 0), -1) << "process " << p << " survived";
    EXPECT_EQ(errno, ESRCH);
  }
  fs::remove_all(dir);
}

// Sends SIGINT to the launcher `pid` once `ready()` holds (polled up to 60 s) and waits for it
// to exit: its wait status (-1 when it was still running 30 s later) and how long it took.
struct Interrupted {
  int status = -1;
  double seconds = 0;
};
template <typename Ready>
Interrupted InterruptWhen(pid_t pid, Ready ready) {
  Interrupted out;
  if (!PollUntil(ready, std::chrono::seconds(60))) {
    WaitFor(pid, std::chrono::seconds(0));
    return out;
  }
  const auto signalled = Clock::now();
  if (kill(pid, SIGINT) != 0) return out;
  out.status = WaitFor(pid, std::chrono::seconds(30));
  out.seconds = std::chrono::duration<double>(Clock::now() - signalled).count();
  return out;
}

// A job of 256 servers (tiny shards, one worker), interrupted while the launcher is still
// starting its servers: one fork and exec after another, seconds for all of them. The stop
// neither waits for the rest to start nor for each child in turn.
TEST(EndToEnd, SigintWhileHundredsOfServersStartStopsWithinFiveSeconds) {
  fs::path dir = TempDir("sigint_many");
  std::ofstream(dir / "job.yaml") << Spec("sigint-many", 1000000, 1, "", 256);
  pid_t pid = Start(
      {"run", (dir / "job.yaml").string(), "--output", (dir / "out").string(), "--no-progress"},
      dir / "run.log");
  // The launcher creates a server's log as it starts it: the 21st of 256 is early on.
  const Interrupted stopped =
      InterruptWhen(pid, [&] { return fs::exists(dir / "out" / "logs" / "server-20.log"); });
  const std::string log = ReadFile(dir / "run.log");
  ASSERT_NE(stopped.status, -1) << "launcher did not exit within 30 s of SIGINT:\n" << log;
  EXPECT_LE(stopped.seconds, 5.0) << log;
  EXPECT_TRUE(WIFEXITED(stopped.status) && WEXITSTATUS(stopped.status) == 130) << log;
  EXPECT_NE(log.find("ecps: stopping: waiting for "), std::string::npos) << log;
  EXPECT_NE(log.find("servers"), std::string::npos) << log;
  EXPECT_EQ(ProcessesMentioning((dir / "out").string()), std::vector<std::string>());
  fs::remove_all(dir);
}

// Between two polls of the coordinator the launcher sleeps monitoring.metrics_interval_ms
// (ten minutes here): a signal does not wait for the next poll.
TEST(EndToEnd, SigintBetweenTwoPollsStopsWithinFiveSeconds) {
  fs::path dir = TempDir("sigint_poll");
  std::string spec = Spec("sigint-poll", 1000000, 1);
  const std::string every = "metrics_interval_ms: ";
  spec.replace(spec.find(every) + every.size(), 3, "600000");
  std::ofstream(dir / "job.yaml") << spec;
  pid_t pid = Start(
      {"run", (dir / "job.yaml").string(), "--output", (dir / "out").string(), "--no-progress"},
      dir / "run.log");
  // metrics.csv: its header, then a row per poll; after the first, the launcher sleeps.
  const Interrupted stopped = InterruptWhen(pid, [&] {
    const std::string csv = ReadFile(dir / "out" / "metrics.csv");
    return std::count(csv.begin(), csv.end(), '\n') >= 2;
  });
  const std::string log = ReadFile(dir / "run.log");
  ASSERT_NE(stopped.status, -1) << "launcher did not exit within 30 s of SIGINT:\n" << log;
  EXPECT_LE(stopped.seconds, 5.0) << log;
  EXPECT_TRUE(WIFEXITED(stopped.status) && WEXITSTATUS(stopped.status) == 130) << log;
  EXPECT_EQ(ProcessesMentioning((dir / "out").string()), std::vector<std::string>());
  fs::remove_all(dir);
}

// A job on Criteo TSV data at `path`: 1 server, `workers` workers, batches of 16.
std::string CriteoSpec(const std::string& name, int steps, int workers, const fs::path& path) {
  return "job:\n  name: " + name + "\n  steps: " + std::to_string(steps) +
         "\n  eval_every: 0\n  token: e2e-token\n"
         "cluster:\n  servers: 1\n  workers: " + std::to_string(workers) +
         "\n  heartbeat_interval_ms: 100\n"
         "model:\n  embedding_dim: 8\n  bottom_mlp: [32, 8]\n  top_mlp: [32, 16]\n"
         "  table_rows: 1000\n"
         "data:\n  source: criteo_tsv\n  paths: [" + path.string() +
         "]\n  batch_size: 16\n  eval_fraction: 0\n"
         "monitoring:\n  metrics_interval_ms: 100\n";
}

// The lines of tests/data/criteo_sample.tsv.
std::vector<std::string> SampleLines() {
  std::ifstream in(std::string(ECPS_TEST_DATA_DIR) + "/criteo_sample.tsv");
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

// Runs `ecps run` on the spec in dir/job.yaml; its wait status, or -1 when it did not end.
int RunJob(const fs::path& dir) {
  pid_t pid = Start({"run", (dir / "job.yaml").string(), "--output", (dir / "out").string(),
                     "--no-progress"},
                    dir / "run.log");
  return WaitFor(pid, std::chrono::seconds(120));
}

TEST(EndToEnd, AShortFileSaysTheDataRanOutAndNamesItsMalformedLines) {
  fs::path dir = TempDir("short");
  const std::vector<std::string> lines = SampleLines();
  ASSERT_EQ(lines.size(), 200u);
  {
    std::ofstream data(dir / "data.tsv");
    for (size_t i = 0; i < lines.size(); ++i) {
      data << lines[i] << "\n";
      if (i == 9) data << "1\t2\t3\n";  // line 11
    }
    data << "0\tnot a sample\n";  // line 202
  }
  std::ofstream(dir / "job.yaml") << CriteoSpec("short", 100, 1, dir / "data.tsv");
  const int status = RunJob(dir);
  const std::string log = ReadFile(dir / "run.log");
  ASSERT_NE(status, -1) << log;
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << log;
  // 200 samples are 12 batches of 16 and one of 8: 13 steps of the 100 asked.
  EXPECT_NE(log.find("data ran out at step 13 of 100 (200 of the 1600 samples asked)"),
            std::string::npos)
      << log;
  const std::string where = (dir / "data.tsv").string();
  EXPECT_NE(log.find("skipped 2 malformed input lines"), std::string::npos) << log;
  EXPECT_NE(log.find("  " + where + ":11: expected 40 columns, found 3"), std::string::npos)
      << log;
  const std::string report = ReadFile(dir / "out" / "report.json");
  EXPECT_NE(report.find("\"steps\": 13,"), std::string::npos) << report;
  EXPECT_NE(report.find("\"samples\": 200,"), std::string::npos) << report;
  EXPECT_NE(report.find("\"steps_asked\": 100,"), std::string::npos) << report;
  EXPECT_NE(report.find("\"samples_asked\": 1600,"), std::string::npos) << report;
  EXPECT_NE(report.find("\"data_exhausted\": true,"), std::string::npos) << report;
  EXPECT_NE(report.find("\"bad_lines\": 2,"), std::string::npos) << report;
  EXPECT_NE(report.find("\"" + where + ":11: expected 40 columns, found 3\""), std::string::npos)
      << report;
  EXPECT_NE(report.find("\"" + where + ":202: expected 40 columns, found 2\""),
            std::string::npos)
      << report;
  fs::remove_all(dir);
}

// A NUL byte in line 14 once made the whole file "a binary file". It is one malformed line:
// the job trains with data.max_bad_lines at 1 and fails, naming the line, at 0.
TEST(EndToEnd, ALineWithANulByteIsOneMalformedLineNotABinaryFile) {
  fs::path dir = TempDir("nul-line");
  std::vector<std::string> lines = SampleLines();
  lines[13][0] = '\0';  // line 14's label
  {
    std::ofstream data(dir / "data.tsv", std::ios::binary);
    for (const std::string& l : lines) data << l << "\n";
  }
  const std::string where = (dir / "data.tsv").string() + ":14: label '\\x00' is not 0 or 1";
  for (int max_bad : {1, 0}) {
    std::string spec = CriteoSpec("nul-line", 10, 1, dir / "data.tsv");
    const std::string data_key = "  eval_fraction: 0\n";
    spec.insert(spec.find(data_key) + data_key.size(),
                "  max_bad_lines: " + std::to_string(max_bad) + "\n");
    std::ofstream(dir / "job.yaml") << spec;
    const int status = RunJob(dir);
    const std::string log = ReadFile(dir / "run.log");
    ASSERT_NE(status, -1) << log;
    if (max_bad == 1) {
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << log;
      const std::string report = ReadFile(dir / "out" / "report.json");
      EXPECT_NE(report.find("\"steps\": 10,"), std::string::npos) << report;
      EXPECT_NE(report.find("\"bad_lines\": 1,"), std::string::npos) << report;
    } else {
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << log;
      EXPECT_NE(log.find("data.max_bad_lines = 0"), std::string::npos) << log;
    }
    EXPECT_NE(log.find(where), std::string::npos) << log;
    EXPECT_EQ(log.find("binary file"), std::string::npos) << log;
  }
  fs::remove_all(dir);
}

// A port on 127.0.0.1 that was free a moment ago (the kernel's choice for port 0).
int FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t size = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &size);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// Waits until `path` holds `text` (true) or `deadline` passes (false).
bool WaitForText(const fs::path& path, const std::string& text, std::chrono::seconds deadline) {
  return PollUntil([&] { return ReadFile(path).find(text) != std::string::npos; }, deadline);
}

// Roles started one by one, as on a cluster, whose coordinator is SIGKILLed and never comes
// back: the worker trains on without it (its evaluations go on), and after
// cluster.coordinator_grace_s both it and the server stop with exit code 1, saying why,
// instead of running on unsupervised.
TEST(EndToEnd, RolesWhoseCoordinatorDiedForGoodStopAfterTheGrace) {
  fs::path dir = TempDir("grace");
  const int port = FreeLoopbackPort();
  const std::string coordinator = "127.0.0.1:" + std::to_string(port);
  std::ofstream(dir / "job.yaml")
      << "job: {name: grace, steps: 1000000, eval_every: 20, eval_samples: 256, token: e2e-token}\n"
         "cluster:\n  servers: 1\n  workers: 1\n  coordinator_port: " << port
      << "\n  coordinator: \"" << coordinator << "\"\n"
         "  heartbeat_interval_ms: 100\n  heartbeat_timeout_ms: 1000\n  coordinator_grace_s: 3\n"
         "model: {embedding_dim: 8, bottom_mlp: [16, 8], top_mlp: [16], table_rows: 1000}\n"
         "data: {source: synthetic, batch_size: 64}\n"
         "fault_tolerance: {mode: none, checkpoint: {save_final: false}}\n";
  setenv("ECPS_TOKEN", "e2e-token", 1);
  const std::string spec = (dir / "job.yaml").string();
  const pid_t server = Start({"server", "--spec", spec, "--id", "0"}, dir / "server.log");
  const pid_t worker = Start({"worker", "--spec", spec, "--id", "0"}, dir / "worker.log");
  const pid_t coord = Start({"coordinator", "--spec", spec}, dir / "coordinator.log");
  unsetenv("ECPS_TOKEN");
  ASSERT_TRUE(WaitForText(dir / "worker.log", "eval AUC", std::chrono::seconds(60)))
      << ReadFile(dir / "worker.log") << ReadFile(dir / "coordinator.log");
  ASSERT_EQ(::kill(coord, SIGKILL), 0);
  WaitFor(coord, std::chrono::seconds(10));
  // Training goes on: another evaluation after the coordinator's death is noticed.
  const fs::path worker_log = dir / "worker.log";
  ASSERT_TRUE(WaitForText(worker_log, "the coordinator does not answer", std::chrono::seconds(30)))
      << ReadFile(worker_log);
  const size_t noticed = ReadFile(worker_log).find("the coordinator does not answer");
  EXPECT_TRUE(PollUntil(
      [&] { return ReadFile(worker_log).find("eval AUC", noticed) != std::string::npos; },
      std::chrono::seconds(30)))
      << "no training without the coordinator:\n" << ReadFile(worker_log);

  for (const auto& [pid, log] : {std::pair{server, dir / "server.log"}, std::pair{worker, worker_log}}) {
    const int status = WaitFor(pid, std::chrono::seconds(60));
    const std::string text = ReadFile(log);
    ASSERT_NE(status, -1) << "still running past the grace:\n" << text;
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << text;
    EXPECT_NE(text.find("no answer from the coordinator at " + coordinator), std::string::npos)
        << text;
    EXPECT_NE(text.find("(cluster.coordinator_grace_s = 3): it is not coming back; stopping"),
              std::string::npos)
        << text;
  }
  fs::remove_all(dir);
}

TEST(EndToEnd, ACompressedFileFailsTheJobNamingIt) {
  fs::path dir = TempDir("gzip");
  std::ofstream(dir / "data.tsv.gz", std::ios::binary) << std::string("\x1f\x8b\x08\0\0\0", 6);
  std::ofstream(dir / "job.yaml") << CriteoSpec("gzip", 10, 1, dir / "data.tsv.gz");
  const int status = RunJob(dir);
  const std::string log = ReadFile(dir / "run.log");
  ASSERT_NE(status, -1) << log;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << log;
  EXPECT_NE(log.find("job failed: worker 0 failed: INVALID_ARGUMENT: data.paths: " +
                     (dir / "data.tsv.gz").string() + " is gzip-compressed: decompress it first"),
            std::string::npos)
      << log;
  EXPECT_NE(ReadFile(dir / "out" / "report.json").find("\"ok\": false"), std::string::npos);
  fs::remove_all(dir);
}

TEST(EndToEnd, AWorkerWithNothingToTrainFailsTheJob) {
  fs::path dir = TempDir("empty_partition");
  std::ofstream(dir / "data.tsv") << SampleLines().at(0) << "\n";  // one row, two workers
  std::ofstream(dir / "job.yaml") << CriteoSpec("empty_partition", 10, 2, dir / "data.tsv");
  const int status = RunJob(dir);
  const std::string log = ReadFile(dir / "run.log");
  ASSERT_NE(status, -1) << log;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << log;
  EXPECT_NE(log.find("worker 1 trained 0 samples: its partition (1 of 2 workers) of data.paths [" +
                     (dir / "data.tsv").string() + "] is empty"),
            std::string::npos)
      << log;
  fs::remove_all(dir);
}

TEST(EndToEnd, BadSpecStartsNothingAndNamesTheKey) {
  fs::path dir = TempDir("badspec");
  std::ofstream(dir / "job.yaml") << Spec("bad", 10, 1, "  bogus_key: 3\n");
  pid_t pid = Start({"run", (dir / "job.yaml").string(), "--output", (dir / "out").string()},
                    dir / "run.log");
  int status = WaitFor(pid, std::chrono::seconds(30));
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2);
  std::string log = ReadFile(dir / "run.log");
  EXPECT_NE(log.find("monitoring.bogus_key"), std::string::npos) << log;
  EXPECT_FALSE(fs::exists(dir / "out")) << "a bad spec must not start the job";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ecps
