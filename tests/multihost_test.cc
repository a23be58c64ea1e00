// Several hosts, for real: every role in a network namespace of its own, joined by veth links
// to a bridge in another namespace (10.213.7.0/24, inside namespaces this test makes and
// removes). The roles run as single roles (`ecps coordinator|server|worker`), started in
// the wrong order (servers and the worker before the coordinator), bind 0.0.0.0 and advertise
// what they find on their interface: a role that advertised 127.0.0.1 (or 0.0.0.0) could not
// be reached from any other namespace, and the job would not train.
//
// Mid training the test SIGKILLs a server, then takes another server's link down (a
// partition). Both must be detected, fenced and rebuilt online on spares; the partitioned
// process, when its link comes back, must find itself fenced and exit without changing
// anything: the job finishes every step and its final scrub is clean.
//
// A second test runs two coordinators on two hosts with the state in a three-member etcd on a
// third, and cuts the active one's link (the standby takes over; the cut-off one stops itself).
//
// Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN for `ip netns`): skips with one line otherwise.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "proto/ecps.pb.h"
#include "tests/ecps_process.h"
#include "tests/etcd_cluster.h"

namespace ecps {
namespace {

namespace fs = std::filesystem;
using namespace testing_process;  // NOLINT
using Clock = std::chrono::steady_clock;

constexpr char kSubnet[] = "10.213.7.";
constexpr int kServers = 5;
constexpr int kSpares = 2;
constexpr int kSteps = 1500;
constexpr char kToken[] = "multihost-test-token";

// Node index -> role: 0 the coordinator, 1..5 servers 0..4, 6..7 spares, 8 the worker.
constexpr int kCoordinatorNode = 0;
constexpr int kWorkerNode = 1 + kServers + kSpares;
constexpr int kNodes = kWorkerNode + 1;
int ServerNode(int id) { return 1 + id; }

// Runs a command line; its output goes to `log` (appended).
int Shell(const std::string& command, const fs::path& log) {
  return std::system(absl::StrCat(command, " >>", log.string(), " 2>&1").c_str());
}

class MultiHostTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "multihost: needs root for network namespaces";
    dir_ = TempDir("multihost");
    setup_log_ = dir_ / "netns.log";
    prefix_ = absl::StrCat("ecpsmh", getpid() % 100000);
    if (Shell("ip netns add " + Ns(-1), setup_log_) != 0) {
      GTEST_SKIP() << "multihost: cannot create network namespaces (ip netns add failed; see "
                   << setup_log_ << ")";
    }
    made_.push_back(Ns(-1));
    // The bridge: the "switch" every host's link plugs into.
    Must("ip -n " + Ns(-1) + " link add br0 type bridge");
    Must("ip -n " + Ns(-1) + " link set br0 up");
    for (int i = 0; i < kNodes; ++i) {
      Must("ip netns add " + Ns(i));
      made_.push_back(Ns(i));
      Must(absl::StrCat("ip -n ", Ns(-1), " link add v", i, " type veth peer name eth0 netns ",
                        Ns(i)));
      Must(absl::StrCat("ip -n ", Ns(-1), " link set v", i, " master br0"));
      Must(absl::StrCat("ip -n ", Ns(-1), " link set v", i, " up"));
      Must(absl::StrCat("ip -n ", Ns(i), " addr add ", Address(i), "/24 dev eth0"));
      Must(absl::StrCat("ip -n ", Ns(i), " link set eth0 up"));
      Must(absl::StrCat("ip -n ", Ns(i), " link set lo up"));
    }
    setenv("ECPS_TOKEN", kToken, 1);
  }

  void TearDown() override {
    for (pid_t pid : pids_) kill(pid, SIGKILL);
    for (pid_t pid : pids_) waitpid(pid, nullptr, 0);
    for (const std::string& ns : made_) Shell("ip netns delete " + ns, setup_log_);
  }

  std::string Ns(int node) const {
    return node < 0 ? prefix_ + "-br" : absl::StrCat(prefix_, "-", node);
  }
  static std::string Address(int node) { return absl::StrCat(kSubnet, node + 1); }
  std::string CoordinatorAddress() const { return Address(kCoordinatorNode) + ":7000"; }

  void Must(const std::string& command) {
    ASSERT_EQ(Shell(command, setup_log_), 0) << command << "; see " << setup_log_;
  }

  // `ecps ARGS` inside node's namespace, output in DIR/NAME.log; the pid is the role's own
  // (ip netns exec execs it).
  pid_t StartIn(int node, const std::string& name, const std::vector<std::string>& args) {
    const fs::path log = dir_ / (name + ".log");
    pid_t pid = fork();
    if (pid == 0) {
      std::vector<std::string> all = {"ip", "netns", "exec", Ns(node), ECPS_BINARY};
      all.insert(all.end(), args.begin(), args.end());
      std::vector<char*> argv;
      for (auto& a : all) argv.push_back(a.data());
      argv.push_back(nullptr);
      FILE* f = freopen(log.c_str(), "w", stdout);
      (void)f;
      dup2(STDOUT_FILENO, STDERR_FILENO);
      execvp("ip", argv.data());
      _exit(127);
    }
    pids_.push_back(pid);
    return pid;
  }

  // The job's status, asked from the worker's host of the coordinator that answers (only one
  // that leads listens); nullopt while none does.
  std::optional<v1::StatusResponse> Status() {
    const fs::path out = dir_ / "status.json";
    std::vector<std::string> asked = coordinators_;
    if (asked.empty()) asked.push_back(CoordinatorAddress());
    for (const std::string& coordinator : asked) {
      std::string command = absl::StrCat("ip netns exec ", Ns(kWorkerNode), " ", ECPS_BINARY,
                                         " status ", coordinator, " --json >", out.string(),
                                         " 2>/dev/null");
      if (std::system(command.c_str()) != 0) continue;
      v1::StatusResponse response;
      if (google::protobuf::util::JsonStringToMessage(ReadFile(out), &response).ok()) {
        return response;
      }
    }
    return std::nullopt;
  }

  // Polls the status until `done` holds; fails the test at the deadline.
  std::optional<v1::StatusResponse> WaitUntil(
      const std::string& what, const std::function<bool(const v1::StatusResponse&)>& done,
      std::chrono::seconds timeout = std::chrono::seconds(90)) {
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      auto st = Status();
      if (st && done(*st)) return st;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << "timed out waiting for " << what << "; logs in " << dir_;
    return std::nullopt;
  }

  // Every server address in the map is a host's own, reachable from the others.
  static void ExpectAddressesInSubnet(const v1::StatusResponse& st) {
    for (const auto& n : st.nodes()) {
      if (n.role() != v1::ROLE_SERVER) continue;
      EXPECT_TRUE(absl::StartsWith(n.address(), kSubnet))
          << "server " << n.id() << " advertises " << n.address();
    }
  }

  // The job's spec in the test's folder: five servers (k 4, r 1) and a worker; `cluster`
  // lines added to its cluster section, `sections` after it.
  fs::path WriteSpec(const std::string& name, const std::string& cluster,
                     const std::string& sections) {
    const fs::path spec = dir_ / "spec.yaml";
    std::ofstream(spec) << absl::StrCat(R"(
job: {name: )", name, R"(, steps: )", kSteps, R"(, eval_every: 0, eval_samples: 2048, output_dir: )",
                                        (dir_ / "out").string(), R"(}
cluster:
  servers: )", kServers, "\n", cluster, R"(  workers: 1
  coordinator_port: 7000
  heartbeat_interval_ms: 200
  heartbeat_timeout_ms: 1500
  rpc_timeout_ms: 3000
)", sections, R"(model: {num_dense: 13, num_sparse: 8, embedding_dim: 8, table_rows: 4000, bottom_mlp: [16, 8], top_mlp: [16]}
data: {source: synthetic, batch_size: 128}
fault_tolerance: {mode: erasure_code, k: 4, r: 1, checkpoint: {save_final: false}}
monitoring: {log_level: info}
)");
    return spec;
  }

  // Servers 0..4 and worker 0 of `spec`, each on its host; the servers' pids into `servers`,
  // the worker's returned.
  pid_t StartServersAndWorker(const fs::path& spec, std::vector<pid_t>* servers) {
    for (int id = 0; id < kServers; ++id) {
      servers->push_back(StartIn(ServerNode(id), absl::StrCat("server-", id),
                                 {"server", "--spec", spec.string(), "--id", std::to_string(id)}));
    }
    return StartIn(kWorkerNode, "worker", {"worker", "--spec", spec.string(), "--id", "0"});
  }

  // Waits for the job's end: the coordinator that ends it (`coordinator`, logging to `log` in
  // the test's folder) and the worker exit 0. Returns the final status it wrote to
  // `final_status`, expected FINISHED after every step with a clean scrub.
  v1::StatusResponse ExpectCleanEnd(pid_t coordinator, const std::string& log, pid_t worker,
                                    const fs::path& final_status) {
    const int coordinator_exit = WaitFor(coordinator, std::chrono::seconds(180));
    EXPECT_NE(coordinator_exit, -1) << "the job did not end; logs in " << dir_;
    EXPECT_TRUE(coordinator_exit != -1 && WIFEXITED(coordinator_exit) &&
                WEXITSTATUS(coordinator_exit) == 0)
        << ReadFile(dir_ / log);
    const int worker_exit = WaitFor(worker, std::chrono::seconds(30));
    EXPECT_TRUE(WIFEXITED(worker_exit) && WEXITSTATUS(worker_exit) == 0);
    v1::StatusResponse last;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(ReadFile(final_status), &last).ok())
        << final_status;
    EXPECT_EQ(last.phase(), v1::JOB_FINISHED) << last.error();
    EXPECT_EQ(last.step(), kSteps);
    EXPECT_TRUE(last.scrub().done());
    EXPECT_TRUE(last.scrub().clean()) << last.scrub().parity_mismatches() << " parity mismatches";
    EXPECT_GT(last.scrub().stripes_checked(), 0);
    return last;
  }

  static int Failure(const v1::StatusResponse& st, int id) {
    for (int i = 0; i < st.failures_size(); ++i) {
      if (st.failures(i).role() == v1::ROLE_SERVER && st.failures(i).id() == id) return i;
    }
    return -1;
  }
  static bool Recovered(const v1::StatusResponse& st, int id) {
    const int i = Failure(st, id);
    return i >= 0 && st.failures(i).state() == v1::FAILURE_RECOVERED;
  }

  fs::path dir_;
  fs::path setup_log_;
  std::vector<std::string> coordinators_;  // what Status asks; empty: CoordinatorAddress()
  std::string prefix_;
  std::vector<std::string> made_;
  std::vector<pid_t> pids_;
};

TEST_F(MultiHostTest, KilledAndPartitionedServersAreRebuiltAcrossHosts) {
  const fs::path spec = WriteSpec("multihost", absl::StrCat("  spares: ", kSpares, "\n"), "");
  // Start order does not matter: the servers and the worker first; they wait for the
  // coordinator (ECPS_COORDINATOR, a flag would do as well).
  setenv("ECPS_COORDINATOR", CoordinatorAddress().c_str(), 1);
  std::vector<pid_t> servers;
  const pid_t worker = StartServersAndWorker(spec, &servers);
  const fs::path final_status = dir_ / "final-status.json";
  const pid_t coordinator =
      StartIn(kCoordinatorNode, "coordinator",
              {"coordinator", "--spec", spec.string(), "--final-status", final_status.string()});

  // Spares take any free id: start them once every server holds its own.
  auto started = WaitUntil("every server registered", [](const v1::StatusResponse& st) {
    int servers = 0;
    for (const auto& n : st.nodes()) servers += n.role() == v1::ROLE_SERVER && n.id() >= 0;
    return servers == kServers;
  });
  ASSERT_TRUE(started);
  ExpectAddressesInSubnet(*started);
  for (int s = 0; s < kSpares; ++s) {
    StartIn(ServerNode(kServers + s), absl::StrCat("spare-", s),
            {"server", "--spec", spec.string()});
  }

  auto training = WaitUntil("training under way", [](const v1::StatusResponse& st) {
    return st.phase() == v1::JOB_RUNNING && st.step() >= kSteps / 6;
  });
  ASSERT_TRUE(training);
  ExpectAddressesInSubnet(*training);  // the spares too

  // A death: SIGKILL server 1.
  ASSERT_EQ(kill(servers[1], SIGKILL), 0);
  ASSERT_TRUE(WaitUntil("server 1 rebuilt on a spare",
                        [](const v1::StatusResponse& st) { return Recovered(st, 1); }));

  // A partition: server 3's link goes down. The process lives on, cut off.
  Must(absl::StrCat("ip -n ", Ns(-1), " link set v", ServerNode(3), " down"));
  auto fenced = WaitUntil("server 3 declared dead and rebuilt on the other spare",
                          [](const v1::StatusResponse& st) { return Recovered(st, 3); });
  ASSERT_TRUE(fenced);
  EXPECT_LT(fenced->step(), kSteps) << "the job ended before the partition healed: no check";
  int status = 0;
  EXPECT_EQ(waitpid(servers[3], &status, WNOHANG), 0) << "the partitioned server is gone already";
  // The link comes back: the old server 3 learns it was replaced and leaves.
  Must(absl::StrCat("ip -n ", Ns(-1), " link set v", ServerNode(3), " up"));
  EXPECT_NE(WaitFor(servers[3], std::chrono::seconds(60)), -1)
      << "the partitioned server did not exit after its link came back";

  // The job finishes every step, with nothing lost and a clean scrub.
  const v1::StatusResponse last = ExpectCleanEnd(coordinator, "coordinator.log", worker,
                                                 final_status);
  ASSERT_EQ(last.failures_size(), 2);
  EXPECT_TRUE(Recovered(last, 1));
  EXPECT_TRUE(Recovered(last, 3));
  for (const auto& e : last.failures()) EXPECT_TRUE(e.by_spare()) << e.id();
}

// Standby coordinators across hosts, with the state in a real three-member etcd on a host of
// its own: the active coordinator's link goes down mid-training. Cut off, it cannot renew its
// lease, so it stops serving by itself (exit 6, "no longer leads") before etcd hands the lead
// on; the standby on another host takes the job over as term 2, and the roles, which know both
// addresses, follow it. Training never stops, the old coordinator is gone for good once its link
// is back, nobody is declared dead, and the job ends clean under the new term.
TEST_F(MultiHostTest, ACoordinatorCutOffIsReplacedByItsStandbyAndStaysOut) {
  if (EtcdBinary().empty()) GTEST_SKIP() << "etcd is not installed (deploy/setup.sh --tests)";
  constexpr int kStandbyNode = 1 + kServers;   // a spare's host in the other test
  constexpr int kEtcdNode = kStandbyNode + 1;  // the other spare's
  EtcdCluster etcd;
  ASSERT_EQ(etcd.StartInNamespace(3, dir_ / "etcd", Ns(kEtcdNode), Address(kEtcdNode)), "");
  const std::string active = CoordinatorAddress();
  const std::string standby = Address(kStandbyNode) + ":7000";
  coordinators_ = {active, standby};
  const fs::path spec = WriteSpec("multihost-etcd", "",
                                  absl::StrCat("coordinator:\n  replicas: 2\n  state_store: etcd\n"
                                               "  etcd_endpoints: [", etcd.endpoint_list(),
                                               "]\n  lease_ttl_s: 2\n"));
  setenv("ECPS_COORDINATOR", (active + "," + standby).c_str(), 1);
  const pid_t first = StartIn(kCoordinatorNode, "coordinator",
                              {"coordinator", "--spec", spec.string(), "--final-status",
                               (dir_ / "final-status-1.json").string()});
  ASSERT_TRUE(PollUntil([&] { return absl::StrContains(ReadFile(dir_ / "coordinator.log"),
                                                       "coordinator leads"); },
                        std::chrono::seconds(30)))
      << ReadFile(dir_ / "coordinator.log");
  const fs::path final_status = dir_ / "final-status-2.json";
  const pid_t second = StartIn(kStandbyNode, "coordinator-2",
                               {"coordinator", "--spec", spec.string(), "--final-status",
                                final_status.string()});
  std::vector<pid_t> servers;
  const pid_t worker = StartServersAndWorker(spec, &servers);
  auto training = WaitUntil("training under way", [](const v1::StatusResponse& st) {
    return st.phase() == v1::JOB_RUNNING && st.step() >= kSteps / 6;
  });
  ASSERT_TRUE(training);
  ASSERT_TRUE(absl::StrContains(ReadFile(dir_ / "coordinator-2.log"), "standby"))
      << ReadFile(dir_ / "coordinator-2.log");

  // The partition: the active coordinator's link goes down; the process lives on, cut off.
  const int64_t cut_at = training->step();
  Must(absl::StrCat("ip -n ", Ns(-1), " link set v", kCoordinatorNode, " down"));
  ASSERT_TRUE(PollUntil([&] { return absl::StrContains(ReadFile(dir_ / "coordinator-2.log"),
                                                       "over as term 2"); },
                        std::chrono::seconds(30)))
      << ReadFile(dir_ / "coordinator-2.log");
  auto followed = WaitUntil("the standby's job training on", [&](const v1::StatusResponse& st) {
    return st.step() > cut_at + 100;
  });
  ASSERT_TRUE(followed);
  EXPECT_LT(followed->step(), kSteps) << "the job ended before the partition healed: no check";
  // Cut off, the deposed coordinator stopped by itself: it could not renew its lease.
  const int first_exit = WaitFor(first, std::chrono::seconds(30));
  ASSERT_NE(first_exit, -1) << "the cut-off coordinator still runs:\n"
                            << ReadFile(dir_ / "coordinator.log");
  EXPECT_TRUE(WIFEXITED(first_exit) && WEXITSTATUS(first_exit) == 6) << first_exit;
  EXPECT_TRUE(absl::StrContains(ReadFile(dir_ / "coordinator.log"), "no longer leads"))
      << ReadFile(dir_ / "coordinator.log");
  Must(absl::StrCat("ip -n ", Ns(-1), " link set v", kCoordinatorNode, " up"));

  const v1::StatusResponse last = ExpectCleanEnd(second, "coordinator-2.log", worker,
                                                 final_status);
  EXPECT_EQ(last.failures_size(), 0) << "a node was declared dead in the takeover";
  for (int id = 0; id < kServers; ++id) {
    EXPECT_FALSE(absl::StrContains(ReadFile(dir_ / absl::StrCat("server-", id, ".log")),
                                   "fenced"))
        << "server " << id;
  }
}

}  // namespace
}  // namespace ecps
