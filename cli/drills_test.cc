// DrillRunner (the `faults:` drills of `ecps run`) against real child processes of a local
// launch backend (/bin/sleep standing in for the roles) and the status a coordinator would
// answer: who is signalled, when, and what is left alone.
#include "cli/drills.h"

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace ecps {
namespace {

namespace fs = std::filesystem;

// Polls `done` every 10 ms until it holds, or `timeout` passed (false). (cli/ cannot include
// tests/poll.h, the layering check says.)
bool PollUntil(const std::function<bool()>& done, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

FaultSpec Fault(FaultAction action, int64_t at_step, int target = 0,
                double duration_s = 0) {
  FaultSpec f;
  f.action = action;
  f.at_step = at_step;
  f.target = target;
  f.duration_s = duration_s;
  return f;
}

// The state letter of /proc/PID/stat ('S' sleeping, 'T' stopped, 'Z' zombie); 0 when gone.
char ProcessState(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  return paren == std::string::npos || paren + 2 >= text.size() ? 0 : text[paren + 2];
}

class DrillsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ecps_drills_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    StopPlan plan;
    plan.grace = std::chrono::milliseconds(0);
    backend_->StopAll(plan);
    fs::remove_all(dir_);
  }

  // A child named `name` that sleeps until signalled; its index.
  int Start(const std::string& name) {
    auto index = backend_->Spawn(name, {"/bin/sleep", "600"}, {}, (dir_ / (name + ".log")).string());
    EXPECT_TRUE(index.ok()) << index.status();
    return index.ok() ? *index : -1;
  }
  pid_t Pid(int index) const { return backend_->child(index).pid; }

  // Whether child `index` was reaped after a SIGKILL (polls the backend for a while).
  bool Killed(int index) {
    const bool exited = PollUntil([&] {
      backend_->Poll();
      return backend_->child(index).exited;
    }, std::chrono::seconds(10));
    const int status = backend_->child(index).exit_status;
    return exited && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
  }
  bool Running(int index) {
    backend_->Poll();
    return !backend_->child(index).exited && ProcessState(Pid(index)) != 'T';
  }

  static v1::StatusResponse At(int64_t step) {
    v1::StatusResponse st;
    st.set_step(step);
    return st;
  }
  static void Holds(v1::StatusResponse* st, v1::Role role, int id, pid_t pid,
                    v1::NodeState state = v1::NODE_ACTIVE) {
    v1::NodeInfo* n = st->add_nodes();
    n->set_role(role);
    n->set_id(id);
    n->set_pid(pid);
    n->set_state(state);
  }

  fs::path dir_;
  std::unique_ptr<LaunchBackend> backend_ = MakeLocalBackend();
  ProgressPrinter printer_{false};
  EventLog events_{&printer_};
};

TEST_F(DrillsTest, KillsWhoeverHoldsTheTargetOnceItsStepIsReached) {
  const int s0 = Start("server-0");
  const int s1 = Start("server-1");
  DrillRunner drills({Fault(FaultAction::kKillServer, 10, 1)}, backend_.get());
  v1::StatusResponse st = At(9);
  Holds(&st, v1::ROLE_SERVER, 0, Pid(s0));
  Holds(&st, v1::ROLE_SERVER, 1, Pid(s1));
  drills.Run(st, 1.0, nullptr, &events_);
  EXPECT_TRUE(drills.records().empty()) << "before its step";
  EXPECT_TRUE(Running(s1));

  st.set_step(10);
  drills.Run(st, 2.0, nullptr, &events_);
  ASSERT_TRUE(Killed(s1));
  EXPECT_TRUE(Running(s0)) << "only the target";
  EXPECT_TRUE(drills.IsVictim(Pid(s1)));
  EXPECT_FALSE(drills.IsVictim(Pid(s0)));
  ASSERT_EQ(drills.records().size(), 1u);
  EXPECT_EQ(drills.records()[0].pid, Pid(s1));
  EXPECT_EQ(drills.records()[0].t, 2.0);
  EXPECT_TRUE(absl::StrContains(events_.Take(), "drill at step 10: SIGKILL server 1 (pid "));

  st.set_step(50);
  drills.Run(st, 3.0, nullptr, &events_);
  EXPECT_EQ(drills.records().size(), 1u) << "a drill runs once";
}

// The coordinator has not noticed the first victim yet: it still names it as the holder. The
// second drill on that id waits for the replacement rather than "killing" the dead one again.
TEST_F(DrillsTest, ASecondDrillOnAnIdIsForTheReplacement) {
  const int old_holder = Start("server-1");
  DrillRunner drills({Fault(FaultAction::kKillServer, 10, 1), Fault(FaultAction::kKillServer, 20, 1)}, backend_.get());
  v1::StatusResponse st = At(10);
  Holds(&st, v1::ROLE_SERVER, 1, Pid(old_holder));
  drills.Run(st, 1.0, nullptr, &events_);
  ASSERT_TRUE(Killed(old_holder));
  st.set_step(25);
  drills.Run(st, 2.0, nullptr, &events_);
  EXPECT_EQ(drills.records().size(), 1u) << "the victim is nobody's target any more";

  const int replacement = Start("server-1-r1");
  v1::StatusResponse now = At(26);
  Holds(&now, v1::ROLE_SERVER, 1, Pid(old_holder), v1::NODE_DEAD);
  Holds(&now, v1::ROLE_SERVER, 1, Pid(replacement), v1::NODE_RECOVERING);
  drills.Run(now, 3.0, nullptr, &events_);
  ASSERT_TRUE(Killed(replacement));
  ASSERT_EQ(drills.records().size(), 2u);
  EXPECT_EQ(drills.records()[1].pid, Pid(replacement));
}

TEST_F(DrillsTest, AStoppedServerIsContinuedOnceItsDurationIsOver) {
  const int s2 = Start("server-2");
  DrillRunner drills({Fault(FaultAction::kStopServer, 5, 2, 0.3)}, backend_.get());
  v1::StatusResponse st = At(5);
  Holds(&st, v1::ROLE_SERVER, 2, Pid(s2));
  const auto started = std::chrono::steady_clock::now();
  drills.Run(st, 1.0, nullptr, &events_);
  ASSERT_TRUE(PollUntil([&] { return ProcessState(Pid(s2)) == 'T'; }, std::chrono::seconds(10)))
      << "not stopped";
  EXPECT_TRUE(drills.IsVictim(Pid(s2)));
  ASSERT_TRUE(PollUntil([&] {
    drills.ContinueStopped(&events_);
    return ProcessState(Pid(s2)) != 'T';
  }, std::chrono::seconds(10))) << "never continued";
  EXPECT_GE(std::chrono::steady_clock::now() - started, std::chrono::milliseconds(300))
      << "continued before its duration";
  EXPECT_TRUE(Running(s2)) << "a stop drill does not kill";
  const std::string events = events_.Take();
  EXPECT_TRUE(absl::StrContains(events, "SIGSTOP server 2")) << events;
  EXPECT_TRUE(absl::StrContains(events, "SIGCONT server 2")) << events;
}

TEST_F(DrillsTest, AWorkerDrillKillsTheWorkerOfThatIdNotTheServer) {
  const int s0 = Start("server-0");
  const int w0 = Start("worker-0");
  DrillRunner drills({Fault(FaultAction::kKillWorker, 3, 0)}, backend_.get());
  v1::StatusResponse st = At(3);
  Holds(&st, v1::ROLE_SERVER, 0, Pid(s0));
  Holds(&st, v1::ROLE_WORKER, 0, Pid(w0));
  drills.Run(st, 1.0, nullptr, &events_);
  ASSERT_TRUE(Killed(w0));
  EXPECT_TRUE(Running(s0));
}

// With standby coordinators only the one that leads is killed, and only once one leads;
// without, every coordinator child is (there is one). Its downtime is remembered for the
// launcher, which keeps it down that long.
TEST_F(DrillsTest, KillCoordinatorKillsTheLeaderOnly) {
  const int standby = Start("coordinator");
  const int leader = Start("coordinator");
  DrillRunner drills({Fault(FaultAction::kKillCoordinator, 7, 0, 4.0)}, backend_.get());
  int leading = -1;
  drills.set_active_coordinator([&leading] { return leading; });
  drills.Run(At(7), 1.0, nullptr, &events_);
  EXPECT_TRUE(drills.records().empty()) << "nobody leads yet: the drill waits";
  leading = leader;
  drills.Run(At(8), 2.0, nullptr, &events_);
  ASSERT_TRUE(Killed(leader));
  EXPECT_TRUE(Running(standby));
  EXPECT_EQ(drills.DownFor(Pid(leader)), 4.0);
  EXPECT_EQ(drills.DownFor(Pid(standby)), 0.0);
  EXPECT_TRUE(absl::StrContains(events_.Take(), "a new one in 4.0 s"));

  DrillRunner alone({Fault(FaultAction::kKillCoordinator, 1)}, backend_.get());
  alone.Run(At(1), 3.0, nullptr, &events_);
  EXPECT_TRUE(Killed(standby)) << "without standbys the coordinator child is the one";
}

}  // namespace
}  // namespace ecps
