#include "coordinator/coordinator_process.h"

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "coordinator/coordinator_test_util.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "runtime/env.h"

namespace ecps {
namespace {

using ::ecps::testing::kToken;
using ::ecps::testing::TestSpec;

std::string TempPath(const std::string& name) {
  return absl::StrCat(::testing::TempDir(), "/coordinator-process-", getpid(), "-", name);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Paces Serve as sigtimedwait would, without a signal.
int NoSignal(absl::Duration period) {
  std::this_thread::sleep_for(absl::ToChronoMilliseconds(period));
  return 0;
}

CoordinatorOptions Options() {
  CoordinatorOptions options;
  options.spec = TestSpec(1, 1);
  options.spec.fault_tolerance.checkpoint.save_final = false;  // no real server to save
  options.token = kToken;
  return options;
}

TEST(StartupTimeoutTest, TheOptionOrTheRolesConnectTimeout) {
  CoordinatorOptions options = Options();
  options.spec.cluster.connect_timeout_s = 42;
  options.startup_timeout_ms = -1;
  EXPECT_EQ(StartupTimeout(options), absl::Seconds(42));
  options.startup_timeout_ms = 250;
  EXPECT_EQ(StartupTimeout(options), absl::Milliseconds(250));
  options.startup_timeout_ms = 0;
  EXPECT_EQ(StartupTimeout(options), absl::ZeroDuration());
}

TEST(TickPeriodTest, ATenthOfTheHeartbeatTimeoutWithinBounds) {
  CoordinatorOptions options = Options();
  options.tick_ms = 7;
  EXPECT_EQ(TickPeriod(options), absl::Milliseconds(7));
  options.tick_ms = 0;
  options.spec.cluster.heartbeat_timeout_ms = 500;
  EXPECT_EQ(TickPeriod(options), absl::Milliseconds(50));
  options.spec.cluster.heartbeat_timeout_ms = 60000;
  EXPECT_EQ(TickPeriod(options), absl::Milliseconds(100));
  options.spec.cluster.heartbeat_timeout_ms = 5;
  EXPECT_EQ(TickPeriod(options), absl::Milliseconds(1));
}

TEST(CoordinatorExitCodeTest, FinishedDataLostFailedOrNotEnded) {
  EXPECT_EQ(CoordinatorExitCode(v1::JOB_FINISHED, false), 0);
  EXPECT_EQ(CoordinatorExitCode(v1::JOB_FAILED, true), kExitDataLost);
  EXPECT_EQ(CoordinatorExitCode(v1::JOB_FAILED, false), 1);
  EXPECT_EQ(CoordinatorExitCode(v1::JOB_RUNNING, false), 1);
  EXPECT_EQ(CoordinatorExitCode(v1::JOB_STARTING, false), 1);
}

TEST(WriteFileDurablyTest, WritesTheContentAndNamesAFileItCannotWrite) {
  const std::string path = TempPath("atomic");
  ASSERT_TRUE(WriteFileDurably(path, "one\n").ok());
  ASSERT_TRUE(WriteFileDurably(path, "two\n").ok());
  EXPECT_EQ(ReadFile(path), "two\n");
  std::remove(path.c_str());
  const absl::Status failed = WriteFileDurably("/nonexistent-dir/x", "x");
  EXPECT_FALSE(failed.ok());
  EXPECT_NE(failed.message().find("/nonexistent-dir/x"), std::string::npos) << failed;
}

TEST(CoordinatorProcessTest, ABadSpecIsRefused) {
  CoordinatorOptions options = Options();
  options.spec.cluster.servers = 0;
  EXPECT_FALSE(CoordinatorProcess::Create(options).ok());
}

TEST(CoordinatorProcessTest, StartPublishesThePortAndTheAdvertisedAddress) {
  CoordinatorOptions options = Options();
  options.advertise = "coordinator.example";
  options.port_file = TempPath("port");
  options.address_file = TempPath("address");
  auto process = CoordinatorProcess::Create(options);
  ASSERT_TRUE(process.ok()) << process.status();
  ASSERT_TRUE((*process)->Start().ok());
  const int port = (*process)->port();
  ASSERT_GT(port, 0);
  EXPECT_EQ((*process)->advertised(), absl::StrCat("coordinator.example:", port));
  EXPECT_EQ(ReadFile(options.port_file), absl::StrCat(port, "\n"));
  EXPECT_EQ(ReadFile(options.address_file), absl::StrCat("coordinator.example:", port, "\n"));
  EXPECT_EQ((*process)->Stop(), 1);  // stopped before the job ended
  std::remove(options.port_file.c_str());
  std::remove(options.address_file.c_str());
}

TEST(CoordinatorProcessTest, StartFailsWhenTheAddressFileCannotBeWritten) {
  CoordinatorOptions options = Options();
  options.address_file = "/nonexistent-dir/address";
  auto process = CoordinatorProcess::Create(options);
  ASSERT_TRUE(process.ok()) << process.status();
  const absl::Status started = (*process)->Start();
  EXPECT_FALSE(started.ok());
  EXPECT_NE(started.message().find("/nonexistent-dir/address"), std::string::npos) << started;
}

TEST(CoordinatorProcessTest, AJobNobodyJoinsFailsAfterTheStartupTimeout) {
  CoordinatorOptions options = Options();
  options.startup_timeout_ms = 100;
  options.linger_ms = 10;
  options.final_status_file = TempPath("final-status.json");
  auto process = CoordinatorProcess::Create(options);
  ASSERT_TRUE(process.ok()) << process.status();
  ASSERT_TRUE((*process)->Start().ok());
  (*process)->Serve(NoSignal);  // returns once the job failed and the linger passed
  EXPECT_EQ((*process)->service()->phase(), v1::JOB_FAILED);
  EXPECT_EQ((*process)->Stop(), 1);
  // The final status is the StatusResponse in protobuf's JSON mapping, as the multi-host
  // test and deployments read it.
  v1::StatusResponse last;
  const std::string text = ReadFile(options.final_status_file);
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(text, &last).ok()) << text;
  EXPECT_EQ(last.phase(), v1::JOB_FAILED);
  EXPECT_NE(text.find("\"phase\":\"JOB_FAILED\""), std::string::npos) << text;
  std::remove(options.final_status_file.c_str());
}

TEST(CoordinatorProcessTest, ASignalEndsServingBeforeTheJobEnds) {
  CoordinatorOptions options = Options();
  auto process = CoordinatorProcess::Create(options);
  ASSERT_TRUE(process.ok()) << process.status();
  ASSERT_TRUE((*process)->Start().ok());
  int waits = 0;
  (*process)->Serve([&waits](absl::Duration) { return ++waits == 3 ? SIGTERM : 0; });
  EXPECT_EQ(waits, 3);
  EXPECT_EQ((*process)->Stop(), 1);
}

// Kubernetes starts a coordinator again whenever it exits, also after the job ended. One that
// takes over an ended job keeps the end (FINISHED and FAILED are final: no startup timeout,
// no failure detection, nothing starts again) and, with linger_ms -1, serves it until a
// signal instead of exiting into the next restart.
TEST(CoordinatorProcessTest, ATakeoverOfAnEndedJobServesTheEndUntilASignal) {
  const std::string dir = TempPath("ended-state");
  std::filesystem::remove_all(dir);
  CoordinatorOptions options = Options();
  options.state_dir = dir;
  options.startup_timeout_ms = 100;
  options.linger_ms = 10;
  {
    auto first = CoordinatorProcess::Create(options);
    ASSERT_TRUE(first.ok()) << first.status();
    ASSERT_TRUE((*first)->Start().ok());
    (*first)->Serve(NoSignal);  // nobody joins: the job fails at the startup timeout
    ASSERT_EQ((*first)->service()->phase(), v1::JOB_FAILED);
    EXPECT_EQ((*first)->Stop(), 1);
  }
  // As `ecps run` keeps it (linger 10 ms): the restored end is served briefly, then it exits.
  {
    auto brief = CoordinatorProcess::Create(options);
    ASSERT_TRUE(brief.ok()) << brief.status();
    EXPECT_EQ((*brief)->service()->phase(), v1::JOB_FAILED);
    ASSERT_TRUE((*brief)->Start().ok());
    int waits = 0;
    (*brief)->Serve(
        [&waits](absl::Duration period) { return ++waits == 50 ? SIGTERM : NoSignal(period); });
    EXPECT_LT(waits, 50);
    EXPECT_EQ((*brief)->Stop(), 1);
  }
  // As `ecps k8s` runs it (--linger-ms -1): it serves the end until the signal.
  options.linger_ms = -1;
  auto kept = CoordinatorProcess::Create(options);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ((*kept)->service()->term(), 3u);
  ASSERT_TRUE((*kept)->Start().ok());
  int waits = 0;
  (*kept)->Serve(
      [&waits](absl::Duration period) { return ++waits == 20 ? SIGTERM : NoSignal(period); });
  EXPECT_EQ(waits, 20);
  EXPECT_EQ((*kept)->service()->phase(), v1::JOB_FAILED);
  EXPECT_EQ((*kept)->Stop(), 1);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ecps
