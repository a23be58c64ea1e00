// The child processes of `ecps run`: spawned with their output in log files, each in its own
// process group (Ctrl-C reaches only the launcher, which stops them in order), and tied to
// the launcher with PR_SET_PDEATHSIG so that no child outlives it, even a launcher killed
// with SIGKILL. Not thread-safe.
#ifndef ECPS_CLI_PROCESS_GROUP_H_
#define ECPS_CLI_PROCESS_GROUP_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ecps {

struct Child {
  std::string name;      // "server-1"
  pid_t pid = -1;
  std::string log_path;
  bool exited = false;
  int exit_status = 0;   // waitpid status once exited
};

class ProcessGroup {
 public:
  ProcessGroup() = default;
  ~ProcessGroup() { StopAll(2000); }
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  // Starts argv[0] with `argv` and extra environment entries ("K=V"); stdout and stderr go
  // to `log_path`. Returns the child's index.
  absl::StatusOr<int> Spawn(const std::string& name, const std::vector<std::string>& argv,
                            const std::vector<std::string>& env, const std::string& log_path);

  // Reaps children that have exited (non-blocking). Returns the indices newly exited.
  std::vector<int> Poll();
  // Sends `sig` to one child (if it is still running).
  void Signal(int index, int sig);
  // SIGTERM to every running child, up to `grace_ms` for them to exit, then SIGKILL; reaps all.
  void StopAll(int grace_ms);

  const Child& child(int index) const { return children_[index]; }
  int size() const { return static_cast<int>(children_.size()); }
  int running() const;

 private:
  std::vector<Child> children_;
};

// A short description of a waitpid status: "exit 0", "signal 9 (Killed)".
std::string DescribeExit(int status);

// The last `lines` lines of a file (for error messages that point at a child's log).
std::string TailFile(const std::string& path, int lines);

// The running ecps binary's absolute path (what children and job steps run), or "ecps".
std::string SelfPath();

// `text` in single quotes, safe as one word for any POSIX shell.
std::string ShellQuote(const std::string& text);

}  // namespace ecps

#endif  // ECPS_CLI_PROCESS_GROUP_H_
