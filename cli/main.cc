// ecps: one binary, one subcommand per role (see `ecps help`).
#include <malloc.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/synchronization/mutex.h"
#include "cli/bench_command.h"
#include "cli/checkpoint_command.h"
#include "cli/job_dir.h"
#include "cli/kill_command.h"
#include "cli/launcher.h"
#include "cli/scrub_command.h"
#include "cli/status_command.h"
#include "coordinator/coordinator_main.h"
#include "ps/server_main.h"
#include "runtime/logging.h"
#include "runtime/spec.h"
#include "worker/worker_main.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ECPS_HAS_ASAN 1
#endif
#endif
#ifndef ECPS_HAS_ASAN
#define ECPS_HAS_ASAN 0
#endif

namespace ecps {
namespace {

constexpr char kUsage[] =
    "usage: ecps <command> [options]\n"
    "\n"
    "  run SPEC.yaml [--output DIR] [--no-progress]\n"
    "      start a whole job on this machine (coordinator, servers, workers), train, report\n"
    "  bench throughput SPEC.yaml [--output DIR]\n"
    "      the same job in-process (no servers) and under `ecps run`; prints the ratio\n"
    "  bench recovery SPEC.yaml [--output DIR]\n"
    "      the same failure under erasure_code, replication and checkpoint; a report\n"
    "  checkpoint ADDR | --job DIR\n"
    "      save a checkpoint of a running job now (to fault_tolerance.checkpoint.dir)\n"
    "  scrub ADDR | --job DIR\n"
    "      check every stripe's parity and every dense replica of a running job\n"
    "  status ADDR | --job DIR [--json] [--watch] [--interval-ms N]\n"
    "      show a running job\n"
    "  kill ADDR | --job DIR server|worker N\n"
    "      admin drill: the node holding that id kills itself (SIGKILL)\n"
    "  coordinator --spec SPEC [--host H] [--port P] [--port-file F]\n"
    "  server --spec SPEC --coordinator ADDR [--id N] [--host H] [--port P]\n"
    "  worker --spec SPEC --coordinator ADDR --id N\n"
    "      single roles, for cluster deployments (deploy/)\n"
    "\n"
    "Every role takes --token T (default: $ECPS_TOKEN) and --log-level L. The operator\n"
    "commands (checkpoint, scrub, status, kill) take --job DIR instead of ADDR: the output\n"
    "folder of `ecps run`, which holds the coordinator's address and the job token (DIR/token,\n"
    "mode 0600); --token or ECPS_TOKEN, when set, are used instead of DIR/token.\n";

// Parses "--key value" and "--flag" options after the positional arguments.
struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::string> options;
  std::string error;

  static Args Parse(int argc, char** argv, int first, const std::vector<std::string>& flags) {
    Args a;
    for (int i = first; i < argc; ++i) {
      std::string arg = argv[i];
      if (arg.rfind("--", 0) != 0) {
        a.positional.push_back(arg);
        continue;
      }
      std::string key = arg.substr(2);
      size_t eq = key.find('=');
      if (eq != std::string::npos) {
        a.options[key.substr(0, eq)] = key.substr(eq + 1);
      } else if (std::find(flags.begin(), flags.end(), key) != flags.end()) {
        a.options[key] = "true";
      } else if (i + 1 < argc) {
        a.options[key] = argv[++i];
      } else {
        a.error = "option --" + key + " needs a value";
      }
    }
    return a;
  }
  bool Has(const std::string& k) const { return options.count(k) > 0; }
  std::string Get(const std::string& k, const std::string& def = "") const {
    auto it = options.find(k);
    return it == options.end() ? def : it->second;
  }
  // Returns false (and sets error) on a non-integer value.
  bool GetInt(const std::string& k, int def, int* out) {
    *out = def;
    if (!Has(k)) return true;
    if (absl::SimpleAtoi(Get(k), out)) return true;
    error = "option --" + k + " must be an integer, got '" + Get(k) + "'";
    return false;
  }
  // Rejects options not in `allowed`.
  bool Only(const std::vector<std::string>& allowed) {
    for (const auto& [k, v] : options) {
      if (std::find(allowed.begin(), allowed.end(), k) == allowed.end()) {
        error = "unknown option --" + k;
        return false;
      }
    }
    return true;
  }
};

int UsageError(const std::string& message) {
  std::fprintf(stderr, "ecps: %s\n\n%s", message.c_str(), kUsage);
  return 2;
}

std::string TokenFrom(const Args& a) {
  if (a.Has("token")) return a.Get("token");
  const char* env = std::getenv("ECPS_TOKEN");
  return env == nullptr ? "" : env;
}

// The coordinator and token an operator command talks to: ADDR (the first positional
// argument) or --job DIR's address, and --token, DIR/token or ECPS_TOKEN, in that order.
// `operands` are the positional arguments after ADDR. Prints the error and returns false.
struct Target {
  std::string address;
  std::string token;
  std::vector<std::string> operands;
};
bool ResolveTarget(const Args& a, const std::string& command, size_t operands, Target* out) {
  std::vector<std::string> pos = a.positional;
  if (a.Has("job")) {
    auto job = ReadJobDir(a.Get("job"));
    if (!job.ok()) {
      std::fprintf(stderr, "ecps %s: %s\n", command.c_str(),
                   std::string(job.status().message()).c_str());
      return false;
    }
    out->token = a.Has("token") ? a.Get("token") : job->token;
    if (pos.size() == operands + 1) {
      out->address = pos[0];
      pos.erase(pos.begin());
    } else if (job->address.empty()) {
      std::fprintf(stderr, "ecps %s: %s has no coordinator.address (the job has not started "
                   "listening yet?)\n", command.c_str(), a.Get("job").c_str());
      return false;
    } else {
      out->address = job->address;
    }
  } else {
    if (pos.empty()) {
      UsageError(command + " needs ADDR (host:port) or --job DIR");
      return false;
    }
    out->address = pos[0];
    pos.erase(pos.begin());
    out->token = TokenFrom(a);
  }
  if (pos.size() != operands) {
    UsageError(command == "kill" ? "usage: ecps kill ADDR|--job DIR server|worker N"
                                 : command + " takes ADDR or --job DIR and no other argument");
    return false;
  }
  out->operands = pos;
  return true;
}

// Loads the spec and sets up logging for a single role.
bool LoadRole(const Args& a, const std::string& role, JobSpec* spec) {
  if (!a.Has("spec")) {
    UsageError(role + " needs --spec");
    return false;
  }
  auto loaded = LoadSpecFile(a.Get("spec"));
  if (!loaded.ok()) {
    std::fprintf(stderr, "ecps %s: invalid spec:\n%s\n", role.c_str(),
                 std::string(loaded.status().message()).c_str());
    return false;
  }
  *spec = std::move(*loaded);
  std::string level = a.Get("log-level", spec->monitoring.log_level);
  if (absl::Status s = InitLogging(role, level); !s.ok()) {
    std::fprintf(stderr, "ecps: %s\n", s.ToString().c_str());
    return false;
  }
  return true;
}

int Main(int argc, char** argv) {
  if (argc < 2) return UsageError("missing command");
  std::string command = argv[1];
  if (command == "help" || command == "--help" || command == "-h") {
    std::printf("%s", kUsage);
    return 0;
  }
  Args a = Args::Parse(argc, argv, 2, {"json", "watch", "no-progress"});
  if (!a.error.empty()) return UsageError(a.error);

  if (command == "run") {
    if (!a.Only({"output", "no-progress"})) return UsageError(a.error);
    if (a.positional.size() != 1) return UsageError("run takes exactly one SPEC.yaml");
    RunFlags flags;
    flags.spec_path = a.positional[0];
    flags.output_dir = a.Get("output");
    flags.progress = !a.Has("no-progress");
    return RunJob(flags);
  }
  if (command == "bench") {
    if (!a.Only({"output"})) return UsageError(a.error);
    if (a.positional.size() == 2 && a.positional[0] == "throughput") {
      return RunThroughputBench(a.positional[1], a.Get("output"));
    }
    if (a.positional.size() == 2 && a.positional[0] == "recovery") {
      return RunRecoveryBench(a.positional[1], a.Get("output"));
    }
    return UsageError("usage: ecps bench throughput|recovery SPEC.yaml [--output DIR]");
  }
  if (command == "checkpoint" || command == "scrub" || command == "kill") {
    if (!a.Only({"token", "job"})) return UsageError(a.error);
    Target target;
    if (!ResolveTarget(a, command, command == "kill" ? 2 : 0, &target)) return 2;
    if (command == "checkpoint") return RunCheckpointCommand(target.address, target.token);
    if (command == "scrub") return RunScrubCommand(target.address, target.token);
    return RunKillCommand(target.address, target.token, target.operands[0], target.operands[1]);
  }
  if (command == "status") {
    if (!a.Only({"json", "watch", "interval-ms", "token", "job"})) return UsageError(a.error);
    Target target;
    if (!ResolveTarget(a, command, 0, &target)) return 2;
    int interval = 1000;
    if (!a.GetInt("interval-ms", 1000, &interval)) return UsageError(a.error);
    return RunStatusCommand(target.address, target.token, a.Has("json"), a.Has("watch"),
                            interval);
  }
  if (command == "coordinator") {
    if (!a.Only({"spec", "host", "port", "port-file", "token", "log-level"})) {
      return UsageError(a.error);
    }
    CoordinatorOptions options;
    if (!LoadRole(a, "coordinator", &options.spec)) return 2;
    options.listen_host = a.Get("host", options.spec.cluster.host);
    if (!a.GetInt("port", options.spec.cluster.coordinator_port, &options.port)) {
      return UsageError(a.error);
    }
    options.port_file = a.Get("port-file");
    options.token = TokenFrom(a);
    return RunCoordinator(options);
  }
  if (command == "server") {
    if (!a.Only({"spec", "coordinator", "id", "host", "port", "token", "log-level"})) {
      return UsageError(a.error);
    }
    ServerOptions options;
    if (!a.Has("coordinator")) return UsageError("server needs --coordinator ADDR");
    if (!LoadRole(a, "server", &options.spec)) return 2;
    options.coordinator = a.Get("coordinator");
    options.listen_host = a.Get("host", options.spec.cluster.host);
    if (!a.GetInt("port", 0, &options.port) || !a.GetInt("id", -1, &options.requested_id)) {
      return UsageError(a.error);
    }
    options.token = TokenFrom(a);
    return RunServer(options);
  }
  if (command == "worker") {
    if (!a.Only({"spec", "coordinator", "id", "token", "log-level"})) return UsageError(a.error);
    WorkerOptions options;
    if (!a.Has("coordinator")) return UsageError("worker needs --coordinator ADDR");
    if (!a.Has("id")) return UsageError("worker needs --id N");
    if (!LoadRole(a, "worker", &options.spec)) return 2;
    options.coordinator = a.Get("coordinator");
    if (!a.GetInt("id", 0, &options.id)) return UsageError(a.error);
    if (options.id < 0 || options.id >= options.spec.cluster.workers) {
      return UsageError("--id must be in [0, cluster.workers)");
    }
    options.token = TokenFrom(a);
    return RunWorker(options);
  }
  return UsageError("unknown command '" + command + "'");
}

}  // namespace
}  // namespace ecps

int main(int argc, char** argv) {
  // Every role receives and sends RPCs of hundreds of KiB. glibc would map, zero-fill and
  // unmap fresh pages for each such buffer; kept in the heap they are reused. (glibc refuses
  // a threshold above half its 64 MiB per-thread heap, silently: 32 MiB is the most.)
#if !defined(__SANITIZE_ADDRESS__) && !ECPS_HAS_ASAN
  // (AddressSanitizer's allocator takes no such settings.)
  if (mallopt(M_MMAP_THRESHOLD, 32 << 20) != 1 || mallopt(M_TRIM_THRESHOLD, 256 << 20) != 1) {
    std::fprintf(stderr, "ecps: warning: could not tune malloc; large RPCs will be slower\n");
  }
#endif
  // Debian's Abseil is built with the mutex deadlock detector on, which gRPC pays for on
  // every lock; ecps does not rely on it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return ecps::Main(argc, argv);
}
