#include "cli/process_group.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <thread>

namespace ecps {

absl::StatusOr<int> ProcessGroup::Spawn(const std::string& name,
                                        const std::vector<std::string>& argv,
                                        const std::vector<std::string>& env,
                                        const std::string& log_path) {
  int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::InternalError("cannot open log file " + log_path + ": " + strerror(errno));
  }
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

std::vector<int> ProcessGroup::Poll() {
  std::vector<int> exited;
  for (int i = 0; i < size(); ++i) {
    Child& c = children_[i];
    if (c.exited) continue;
    int status = 0;
    if (waitpid(c.pid, &status, WNOHANG) == c.pid) {
      c.exited = true;
      c.exit_status = status;
      exited.push_back(i);
    }
  }
  return exited;
}

void ProcessGroup::Signal(int index, int sig) {
  if (index < 0 || index >= size() || children_[index].exited) return;
  kill(children_[index].pid, sig);
}

int ProcessGroup::running() const {
  int n = 0;
  for (const Child& c : children_) n += c.exited ? 0 : 1;
  return n;
}

void ProcessGroup::StopAll(int grace_ms) {
  Poll();
  for (int i = 0; i < size(); ++i) {
    // A stopped child (SIGSTOP drills) cannot act on SIGTERM until it continues.
    Signal(i, SIGTERM);
    Signal(i, SIGCONT);
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(grace_ms);
  while (running() > 0 && std::chrono::steady_clock::now() < deadline) {
    Poll();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (int i = 0; i < size(); ++i) Signal(i, SIGKILL);
  for (Child& c : children_) {
    if (c.exited) continue;
    int status = 0;
    waitpid(c.pid, &status, 0);
    c.exited = true;
    c.exit_status = status;
  }
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
