// Starting a program for a test, with its stdout and stderr in a log file.
#ifndef ECPS_TESTS_SPAWN_H_
#define ECPS_TESTS_SPAWN_H_

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

namespace ecps {
namespace testing_process {

// Runs `argv` (argv[0]: the program's path) with stdout and stderr in `log`; returns its pid.
// With `die_with_test`, the child gets SIGKILL when the test process dies, so a daemon a
// crashed test started does not outlive it.
inline pid_t SpawnLogged(const std::vector<std::string>& argv, const std::filesystem::path& log,
                         bool die_with_test = false) {
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    if (die_with_test) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(1);
    }
    std::vector<std::string> copy = argv;
    std::vector<char*> args;
    for (auto& a : copy) args.push_back(a.data());
    args.push_back(nullptr);
    FILE* f = freopen(log.c_str(), "w", stdout);
    (void)f;
    dup2(STDOUT_FILENO, STDERR_FILENO);
    execv(args[0], args.data());
    _exit(127);
  }
  return pid;
}

}  // namespace testing_process
}  // namespace ecps

#endif  // ECPS_TESTS_SPAWN_H_
