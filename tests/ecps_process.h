// Helpers for end-to-end tests that run the real `ecps` binary (ECPS_BINARY): a fresh temp
// folder, reading files, starting `ecps ...` with its output in a log, and waiting for it
// with a deadline.
#ifndef ECPS_TESTS_ECPS_PROCESS_H_
#define ECPS_TESTS_ECPS_PROCESS_H_

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/poll.h"
#include "tests/spawn.h"

namespace ecps {
namespace testing_process {

namespace fs = std::filesystem;

// An empty folder unique to this test process: <tmp>/ecps_<name>_<pid>.
inline fs::path TempDir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("ecps_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

inline std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Starts `ecps ARGS...` with stdout and stderr in `log`; returns its pid.
inline pid_t Start(const std::vector<std::string>& args, const fs::path& log) {
  std::vector<std::string> argv = {ECPS_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  return SpawnLogged(argv, log);
}

// Waits for `pid` to exit, up to `timeout`; returns its wait status, or -1 on timeout (then
// it is killed, and a launcher takes its children with it).
inline int WaitFor(pid_t pid, std::chrono::seconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return -1;
}

// The live processes whose command line contains `text` (a job's folder, say), read from
// /proc: "pid: command line". A zombie has no command line: it is not counted.
inline std::vector<std::string> ProcessesMentioning(const std::string& text) {
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const std::string pid = entry.path().filename().string();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = ReadFile(entry.path() / "cmdline");
    for (char& c : cmdline) c = c == '\0' ? ' ' : c;
    if (cmdline.find(text) != std::string::npos) found.push_back(pid + ": " + cmdline);
  }
  return found;
}

}  // namespace testing_process
}  // namespace ecps

#endif  // ECPS_TESTS_ECPS_PROCESS_H_
