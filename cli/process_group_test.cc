// ProcessGroup::StopAll with real child processes (/bin/sh), some of which ignore SIGTERM.
#include "cli/process_group.h"

#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ecps {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using ::testing::Contains;
using ::testing::HasSubstr;

Child Named(const std::string& name, bool running) {
  Child c;
  c.name = name;
  c.stopping = true;
  c.exited = !running;
  return c;
}

TEST(StoppingLineTest, CountsWhatIsLeftByKind) {
  std::vector<Child> children = {Named("coordinator", true), Named("server-0", true),
                                 Named("server-1", false),   Named("server-2", true),
                                 Named("server-1-r1", true), Named("worker-0", true)};
  EXPECT_EQ(StoppingLine(children, 3),
            "stopping: waiting for 3 of 4 servers, 1 of 1 worker and the coordinator to exit "
            "(SIGKILL in 3 s)");
  children[0].exited = true;
  children[5].exited = true;
  EXPECT_EQ(StoppingLine(children, 1),
            "stopping: waiting for 3 of 4 servers to exit (SIGKILL in 1 s)");
}

TEST(StoppingLineTest, ChildrenThatExitedBeforeTheStopAreNotCounted) {
  std::vector<Child> children = {Named("server-0", true), Named("server-1", true)};
  children[1].stopping = false;  // it had exited before: nothing to wait for
  EXPECT_EQ(StoppingLine(children, 2),
            "stopping: waiting for 1 of 1 server to exit (SIGKILL in 2 s)");
}

class ProcessGroupStopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ecps_process_group_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Starts `n` children named server-I that print "ready" and sleep; those with
  // `ignore_term` ignore SIGTERM (only SIGKILL ends them). Waits until every one is ready.
  void StartSleepers(int n, bool ignore_term) {
    const std::string script =
        std::string(ignore_term ? "trap '' TERM; " : "") + "echo ready; exec sleep 60";
    std::vector<std::string> logs;
    for (int i = 0; i < n; ++i) {
      const std::string name = "server-" + std::to_string(group_.size());
      logs.push_back((dir_ / (name + ".log")).string());
      ASSERT_TRUE(group_.Spawn(name, {"/bin/sh", "-c", script}, {}, logs.back()).ok());
    }
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    for (const std::string& log : logs) {
      while (!absl::StrContains(ReadLog(log), "ready")) {
        ASSERT_LT(Clock::now(), deadline) << log << " never said ready";
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
  }

  static std::string ReadLog(const std::string& path) {
    std::string out;
    if (FILE* f = std::fopen(path.c_str(), "r")) {
      char buf[64];
      size_t got = std::fread(buf, 1, sizeof(buf), f);
      out.assign(buf, got);
      std::fclose(f);
    }
    return out;
  }

  fs::path dir_;
  ProcessGroup group_;
};

TEST_F(ProcessGroupStopTest, TermsAllAtOnceAndKillsWhatIgnoresItAtTheDeadline) {
  StartSleepers(10, /*ignore_term=*/false);
  StartSleepers(10, /*ignore_term=*/true);
  std::vector<std::string> lines;
  StopPlan plan;
  plan.grace = std::chrono::milliseconds(500);
  plan.kill_wait = std::chrono::milliseconds(2000);
  plan.report = [&](const std::string& line) { lines.push_back(line); };
  const auto start = Clock::now();
  EXPECT_EQ(group_.StopAll(plan), 0);
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  // Twenty children each given the grace one after another would take 10 s.
  EXPECT_GE(took, 0.5);
  EXPECT_LT(took, 2.0);
  EXPECT_EQ(group_.running(), 0);
  int by_term = 0, by_kill = 0;
  for (int i = 0; i < group_.size(); ++i) {
    const Child c = group_.child(i);
    ASSERT_TRUE(c.exited);
    by_term += WIFSIGNALED(c.exit_status) && WTERMSIG(c.exit_status) == SIGTERM;
    by_kill += WIFSIGNALED(c.exit_status) && WTERMSIG(c.exit_status) == SIGKILL;
  }
  EXPECT_EQ(by_term, 10);
  EXPECT_EQ(by_kill, 10);
  ASSERT_FALSE(lines.empty());
  EXPECT_THAT(lines.front(), HasSubstr("stopping: waiting for "));
  EXPECT_THAT(lines.front(), HasSubstr(" of 20 servers to exit (SIGKILL in 1 s)"));
  EXPECT_THAT(lines, Contains(HasSubstr("SIGKILL to 10 of 20 servers")));
  EXPECT_THAT(lines.back(), HasSubstr("stopped every process in"));
}

TEST_F(ProcessGroupStopTest, KillNowCutsTheGraceShort) {
  StartSleepers(5, /*ignore_term=*/true);
  StopPlan plan;
  plan.grace = std::chrono::seconds(60);
  int asked = 0;
  plan.kill_now = [&] { return ++asked >= 3; };  // a second Ctrl-C, a few polls in
  const auto start = Clock::now();
  EXPECT_EQ(group_.StopAll(plan), 0);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 5.0);
  EXPECT_EQ(group_.running(), 0);
}

TEST_F(ProcessGroupStopTest, NothingStartsOnceAStopHasBegun) {
  StartSleepers(1, /*ignore_term=*/false);
  group_.StopAll(StopPlan{});
  auto late = group_.Spawn("server-9", {"/bin/sh", "-c", "exec sleep 60"}, {},
                           (dir_ / "late.log").string());
  EXPECT_EQ(late.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(group_.size(), 1);
  EXPECT_TRUE(group_.Poll().empty()) << "the stop accounts for the children it ended";
}

}  // namespace
}  // namespace ecps
