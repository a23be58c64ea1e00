// End-to-end: the operator commands (the real `ecps` binary) say which failure they met
// (cli/operator_call.h): nothing listening, a coordinator that dies during the call (a real
// one killed between two polls of `ecps status --watch`, and one that closes the connection
// once the call's request arrived), plaintext against a TLS coordinator and the reverse, and
// a refused token. Real processes and sockets; certificates from tests/tls/make_certs.sh.
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/socket_test_util.h"
#include "tests/ecps_process.h"
#include "tests/tls/test_certificates.h"

namespace ecps {
namespace {

using namespace testing_process;  // NOLINT: TempDir, ReadFile, Start, WaitFor
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr char kToken[] = "e2e-token";

// What a command printed and how it ended.
struct Outcome {
  int exit_code = -1;  // -1: it did not end within 60 s
  std::string output;
};

Outcome RunEcps(const std::vector<std::string>& args, const fs::path& log) {
  const int status = WaitFor(Start(args, log), std::chrono::seconds(60));
  return Outcome{status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1, ReadFile(log)};
}

// Polls `done` every 10 ms for up to 30 s.
template <typename Done>
bool Eventually(Done done) {
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (!done()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

// A coordinator on its own (`ecps coordinator`) on a free loopback port, waiting for a job
// of two servers and a worker that never come; `tls` is its spec's security section.
class LoneCoordinator {
 public:
  LoneCoordinator(const fs::path& dir, const std::string& tls = "") : dir_(dir) {
    std::ofstream(dir / "coordinator.yaml")
        << "job: {name: ops, steps: 100, token: " << kToken << "}\n"
        << "cluster: {servers: 2, workers: 1}\n"
        << "model: {embedding_dim: 8, bottom_mlp: [16, 8], top_mlp: [16], table_rows: 100}\n"
        << "data: {source: synthetic, batch_size: 16}\n"
        << "monitoring: {metrics_port: -1}\n"
        << tls;
    pid_ = Start({"coordinator", "--spec", (dir / "coordinator.yaml").string(), "--host",
                  "127.0.0.1", "--port", "0", "--port-file", (dir / "port").string()},
                 dir / "coordinator.log");
    Eventually([&] {
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) {  // it gave up (a bad spec): no port
        pid_ = -1;
        return true;
      }
      std::ifstream in(dir / "port");
      return static_cast<bool>(in >> port_) && port_ > 0;
    });
  }
  ~LoneCoordinator() { Kill(); }

  // "127.0.0.1:PORT"; empty when it never listened.
  std::string address() const {
    return port_ > 0 ? "127.0.0.1:" + std::to_string(port_) : std::string();
  }
  std::string log() const { return ReadFile(dir_ / "coordinator.log"); }
  void Kill() {
    if (pid_ > 0) WaitFor(pid_, std::chrono::seconds(0));  // SIGKILL, reaped
    pid_ = -1;
  }

 private:
  const fs::path dir_;
  pid_t pid_ = -1;
  int port_ = 0;
};

// A coordinator that dies in the middle of a call, at the level of its socket: it accepts one
// connection, sends the HTTP/2 SETTINGS a gRPC server opens with (so the client's channel
// comes up), reads until the call's HEADERS frame arrives, then closes its listening socket
// and the connection. No gRPC in it; the client is the real ecps.
class CoordinatorThatDiesMidCall {
 public:
  CoordinatorThatDiesMidCall() : thread_([this] { Serve(); }) {}
  ~CoordinatorThatDiesMidCall() { thread_.join(); }
  std::string address() const { return listener_.address(); }
  bool died_mid_call() const { return died_mid_call_.load(); }

 private:
  void Serve() {
    pollfd p{listener_.fd(), POLLIN, 0};
    if (poll(&p, 1, 30000) != 1) return;
    const int conn = accept4(listener_.fd(), nullptr, nullptr, SOCK_CLOEXEC);
    if (conn < 0) return;
    const unsigned char settings[9] = {0, 0, 0, 4, 0, 0, 0, 0, 0};  // empty SETTINGS frame
    if (write(conn, settings, sizeof(settings)) != sizeof(settings)) return;
    std::string in;
    size_t at = 24;  // past the client's connection preface
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (!died_mid_call_ && Clock::now() < deadline) {
      pollfd r{conn, POLLIN, 0};
      if (poll(&r, 1, 100) != 1) continue;
      char buf[4096];
      const ssize_t got = read(conn, buf, sizeof(buf));
      if (got <= 0) break;
      in.append(buf, static_cast<size_t>(got));
      // HTTP/2 frames: a 24-bit length, a type (1: HEADERS, a call begins), flags, stream id.
      while (in.size() >= at + 9) {
        const size_t length = (static_cast<unsigned char>(in[at]) << 16) |
                              (static_cast<unsigned char>(in[at + 1]) << 8) |
                              static_cast<unsigned char>(in[at + 2]);
        if (in[at + 3] == 1) died_mid_call_ = true;
        if (in.size() < at + 9 + length) break;
        at += 9 + length;
      }
    }
    listener_.Close();  // nothing listens any more, as after a crash
    close(conn);
  }

  testing::LoopbackListener listener_;  // before thread_, which uses it
  std::atomic<bool> died_mid_call_{false};
  std::thread thread_;
};

class OperatorCommandsTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = TempDir("operator_commands"); }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(OperatorCommandsTest, NothingListeningIsCannotConnect) {
  LoneCoordinator gone(dir_);
  const std::string address = gone.address();
  ASSERT_FALSE(address.empty()) << gone.log();
  gone.Kill();
  const Outcome out = RunEcps({"status", address, "--token", kToken}, dir_ / "status.log");
  EXPECT_EQ(out.exit_code, 2) << out.output;
  EXPECT_NE(out.output.find("ecps status: cannot connect to the coordinator at " + address +
                            ": nothing listens there (connection refused)"),
            std::string::npos)
      << out.output;
  EXPECT_EQ(out.output.find("TLS"), std::string::npos) << out.output;
}

// The finding: `ecps checkpoint` whose coordinator died mid-command blamed TLS.
TEST_F(OperatorCommandsTest, ACoordinatorThatDiesMidCallIsConnectionLost) {
  CoordinatorThatDiesMidCall coordinator;
  const Outcome out =
      RunEcps({"checkpoint", coordinator.address(), "--token", kToken}, dir_ / "checkpoint.log");
  ASSERT_TRUE(coordinator.died_mid_call()) << out.output;
  EXPECT_EQ(out.exit_code, 2) << out.output;
  EXPECT_NE(out.output.find("ecps checkpoint: connection lost mid-call: the coordinator at " +
                            coordinator.address()),
            std::string::npos)
      << out.output;
  EXPECT_NE(out.output.find("nothing listens there any more"), std::string::npos) << out.output;
  EXPECT_EQ(out.output.find("TLS"), std::string::npos) << out.output;
}

TEST_F(OperatorCommandsTest, ARealCoordinatorKilledDuringAWatchIsConnectionLost) {
  LoneCoordinator coordinator(dir_);
  ASSERT_FALSE(coordinator.address().empty()) << coordinator.log();
  const fs::path log = dir_ / "watch.log";
  const pid_t watch = Start(
      {"status", coordinator.address(), "--token", kToken, "--watch", "--interval-ms", "100"}, log);
  ASSERT_TRUE(Eventually([&] { return ReadFile(log).find("STARTING") != std::string::npos; }))
      << ReadFile(log);
  coordinator.Kill();
  const int status = WaitFor(watch, std::chrono::seconds(30));
  const std::string output = ReadFile(log);
  ASSERT_NE(status, -1) << output;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << output;
  EXPECT_NE(output.find("ecps status: connection lost mid-call: the coordinator at " +
                        coordinator.address()),
            std::string::npos)
      << output;
  EXPECT_EQ(output.find("TLS"), std::string::npos) << output;
}

TEST_F(OperatorCommandsTest, PlaintextAgainstTlsAndTheReverseIsATlsMismatch) {
  auto certs = TestCertificates::Make();
  ASSERT_NE(certs, nullptr);
  std::string tls = "security:\n  tls:\n    ca: " + certs->Path("ca.pem") + "\n";
  for (const char* role : {"coordinator", "server", "worker"}) {
    tls += std::string("    ") + role + ": {cert: " + certs->Path(std::string(role) + ".pem") +
           ", key: " + certs->Path(std::string(role) + ".key") + "}\n";
  }
  fs::create_directories(dir_ / "tls");
  LoneCoordinator with_tls(dir_ / "tls", tls);
  ASSERT_FALSE(with_tls.address().empty()) << with_tls.log();
  Outcome out = RunEcps({"status", with_tls.address(), "--token", kToken}, dir_ / "plain.log");
  EXPECT_EQ(out.exit_code, 2) << out.output;
  EXPECT_NE(out.output.find("ecps status: TLS expected: the coordinator at " + with_tls.address() +
                            " answers only TLS"),
            std::string::npos)
      << out.output;
  // With the admin certificate it answers: the mismatch was the only trouble.
  const std::vector<std::string> admin = {"--tls-ca",   certs->Path("ca.pem"),
                                          "--tls-cert", certs->Path("admin.pem"),
                                          "--tls-key",  certs->Path("admin.key")};
  std::vector<std::string> args = {"status", with_tls.address(), "--token", kToken};
  args.insert(args.end(), admin.begin(), admin.end());
  out = RunEcps(args, dir_ / "tls.log");
  EXPECT_EQ(out.exit_code, 0) << out.output;

  fs::create_directories(dir_ / "plain");
  LoneCoordinator plain(dir_ / "plain");
  ASSERT_FALSE(plain.address().empty()) << plain.log();
  args = {"scrub", plain.address(), "--token", kToken};
  args.insert(args.end(), admin.begin(), admin.end());
  out = RunEcps(args, dir_ / "reverse.log");
  EXPECT_EQ(out.exit_code, 2) << out.output;
  EXPECT_NE(out.output.find("ecps scrub: plaintext expected: the coordinator at " +
                            plain.address() + " answers only plaintext"),
            std::string::npos)
      << out.output;
}

// Not an operator command, but the same process-level check: a --backend that is neither
// local nor slurm is a usage error, before the spec is even read.
TEST_F(OperatorCommandsTest, RunWithAnUnknownBackendIsAUsageError) {
  const Outcome out = RunEcps({"run", (dir_ / "missing.yaml").string(), "--backend", "pbs"},
                              dir_ / "run.log");
  EXPECT_EQ(out.exit_code, 2) << out.output;
  EXPECT_NE(out.output.find("--backend must be local or slurm, got 'pbs'"), std::string::npos)
      << out.output;
  EXPECT_EQ(out.output.find("missing.yaml"), std::string::npos) << out.output;
}

TEST_F(OperatorCommandsTest, AWrongTokenIsRefused) {
  LoneCoordinator coordinator(dir_);
  ASSERT_FALSE(coordinator.address().empty()) << coordinator.log();
  const Outcome out = RunEcps({"kill", coordinator.address(), "server", "0", "--token", "wrong"},
                              dir_ / "kill.log");
  EXPECT_EQ(out.exit_code, 3) << out.output;
  EXPECT_NE(out.output.find("ecps kill: refused by the coordinator at " + coordinator.address() +
                            ": UNAUTHENTICATED: "),
            std::string::npos)
      << out.output;
}

}  // namespace
}  // namespace ecps
