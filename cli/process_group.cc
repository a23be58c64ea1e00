#include "cli/process_group.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ecps {

namespace {

using Clock = std::chrono::steady_clock;

// "server" from "server-12" and "server-3-r1"; "coordinator" from "coordinator".
std::string KindOf(const std::string& name) { return name.substr(0, name.find('-')); }

// "812 of 1024 servers, 1 of 1 worker and the coordinator": the children a stop waits for,
// by kind, the kinds of a job in the order it starts them, then any other.
std::string StillRunning(const std::vector<Child>& children) {
  struct Count {
    std::string kind;
    int running = 0;
    int total = 0;
  };
  std::vector<Count> counts = {{"server"}, {"spare"}, {"worker"}, {"coordinator"}};
  for (const Child& c : children) {
    if (!c.stopping) continue;
    const std::string kind = KindOf(c.name);
    auto it =
        std::find_if(counts.begin(), counts.end(), [&](const Count& n) { return n.kind == kind; });
    if (it == counts.end()) it = counts.insert(counts.end(), Count{kind});
    it->total += 1;
    it->running += c.exited ? 0 : 1;
  }
  std::vector<std::string> parts;
  for (const Count& n : counts) {
    if (n.running == 0) continue;
    if (n.kind == "coordinator" && n.total == 1) {
      parts.push_back("the coordinator");
    } else {
      parts.push_back(
          absl::StrCat(n.running, " of ", n.total, " ", n.kind, n.total == 1 ? "" : "s"));
    }
  }
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += i + 1 == parts.size() ? " and " : ", ";
    out += parts[i];
  }
  return out;
}

}  // namespace

ProcessGroup::~ProcessGroup() {
  StopPlan quiet;
  quiet.grace = std::chrono::milliseconds(2000);
  StopAll(quiet);
}

absl::StatusOr<int> ProcessGroup::Spawn(const std::string& name,
                                        const std::vector<std::string>& argv,
                                        const std::vector<std::string>& env,
                                        const std::string& log_path) {
  // Everything the child needs is prepared before fork: only async-signal-safe calls after.
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> envs;
  for (char** e = environ; *e != nullptr; ++e) envs.emplace_back(*e);
  for (const auto& e : env) envs.push_back(e);
  std::vector<char*> envp;
  for (auto& e : envs) envp.push_back(e.data());
  envp.push_back(nullptr);
  // Held across fork: a stop that has begun sees every child, and no child starts after it.
  absl::MutexLock lock(&mu_);
  if (stopping_) return absl::CancelledError("the job is stopping: " + name + " not started");
  int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::InternalError("cannot open log file " + log_path + ": " + strerror(errno));
  }
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    close(fd);
    return absl::InternalError(std::string("fork failed: ") + strerror(errno));
  }
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // the launcher died before prctl took effect
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, STDIN_FILENO);
    execve(args[0], args.data(), envp.data());
    _exit(127);
  }
  close(fd);
  children_.push_back(Child{name, pid, log_path});
  return static_cast<int>(children_.size()) - 1;
}

int ProcessGroup::Reap() {
  int running = 0;
  for (Child& c : children_) {
    if (c.exited) continue;
    int status = 0;
    if (waitpid(c.pid, &status, WNOHANG) == c.pid) {
      c.exited = true;
      c.exit_status = status;
    } else {
      ++running;
    }
  }
  return running;
}

std::vector<int> ProcessGroup::Poll() {
  absl::MutexLock lock(&mu_);
  std::vector<bool> before(children_.size());
  for (size_t i = 0; i < children_.size(); ++i) before[i] = children_[i].exited;
  Reap();
  std::vector<int> exited;
  if (stopping_) return exited;
  for (size_t i = 0; i < children_.size(); ++i) {
    if (children_[i].exited && !before[i]) exited.push_back(static_cast<int>(i));
  }
  return exited;
}

void ProcessGroup::Signal(int index, int sig) {
  absl::MutexLock lock(&mu_);
  if (index < 0 || index >= static_cast<int>(children_.size()) || children_[index].exited) return;
  kill(children_[index].pid, sig);
}

Child ProcessGroup::child(int index) const {
  absl::MutexLock lock(&mu_);
  return children_[index];
}

int ProcessGroup::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(children_.size());
}

int ProcessGroup::running() const {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (const Child& c : children_) n += c.exited ? 0 : 1;
  return n;
}

void ProcessGroup::TerminateAll() {
  absl::MutexLock lock(&mu_);
  stopping_ = true;
  Reap();
  for (Child& c : children_) {
    if (c.exited) continue;
    c.stopping = true;
    kill(c.pid, SIGTERM);
    kill(c.pid, SIGCONT);
  }
}

std::string ProcessGroup::KillAll() {
  absl::MutexLock lock(&mu_);
  Reap();
  for (const Child& c : children_) {
    if (!c.exited) kill(c.pid, SIGKILL);
  }
  return StillRunning(children_);
}

int ProcessGroup::StopAll(const StopPlan& plan) {
  const auto start = Clock::now();
  const auto say = [&](const std::string& line) {
    if (plan.report) plan.report(line);
  };
  TerminateAll();
  const auto kill_at = start + plan.grace;
  auto give_up = Clock::time_point::max();
  auto next_report = start + plan.first_report;
  std::string killed;
  int left = 0;
  while (true) {
    std::vector<Child> snapshot;
    {
      absl::MutexLock lock(&mu_);
      left = Reap();
      if (left > 0 && plan.report && Clock::now() >= next_report) snapshot = children_;
    }
    const auto now = Clock::now();
    if (left == 0 || now >= give_up) break;
    const bool killing = give_up != Clock::time_point::max();
    if (!killing && (now >= kill_at || (plan.kill_now && plan.kill_now()))) {
      killed = KillAll();
      say(absl::StrCat("stopping: SIGKILL to ", killed, " after ",
                       absl::StrFormat("%.1f", std::chrono::duration<double>(now - start).count()),
                       " s"));
      give_up = now + plan.kill_wait;
      continue;
    }
    if (!snapshot.empty() && !killing) {
      const auto to_kill = std::chrono::duration<double>(kill_at - now).count();
      say(StoppingLine(snapshot, static_cast<int>(std::ceil(std::max(0.0, to_kill)))));
      next_report = now + plan.report_every;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  if (left > 0) {
    say(absl::StrFormat("stopping: gave up after %.1f s on %d processes killed but not yet reaped",
                        took, left));
  } else if (!killed.empty() || took >= std::chrono::duration<double>(plan.first_report).count()) {
    say(absl::StrFormat("stopped every process in %.1f s", took));
  }
  return left;
}

std::string StoppingLine(const std::vector<Child>& children, int seconds_to_kill) {
  return absl::StrCat("stopping: waiting for ", StillRunning(children), " to exit (SIGKILL in ",
                      seconds_to_kill, " s)");
}

std::string DescribeExit(int status) {
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return "signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  }
  return "status " + std::to_string(status);
}

std::string SelfPath() {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("ecps") : p.string();
}

std::string ShellQuote(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string TailFile(const std::string& path, int lines) {
  std::ifstream in(path);
  std::deque<std::string> last;
  std::string line;
  while (std::getline(in, line)) {
    last.push_back(line);
    if (static_cast<int>(last.size()) > lines) last.pop_front();
  }
  std::string out;
  for (const auto& l : last) out += "    " + l + "\n";
  return out;
}

}  // namespace ecps
