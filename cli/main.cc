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
#include "cli/slurm_script.h"
#include "cli/status_command.h"
#include "coordinator/coordinator_main.h"
#include "ps/server_main.h"
#include "runtime/logging.h"
#include "runtime/net.h"
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
    "  run SPEC.yaml [--output DIR] [--no-progress] [--backend local|slurm]\n"
    "      start a whole job on this machine (coordinator, servers, workers), train, report;\n"
    "      --backend slurm: the roles as job steps of the Slurm allocation it runs in\n"
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
    "  slurm SPEC.yaml [-o FILE] [--output DIR]\n"
    "      write an sbatch script that runs the job under Slurm (docs/deploy.md); default\n"
    "      FILE: DIR/<job name>.sbatch, DIR the job's folder (job.output_dir); -o - prints it\n"
    "  coordinator --spec SPEC [--host H] [--advertise A] [--port P] [--port-file F]\n"
    "              [--address-file F] [--final-status F]\n"
    "  server --spec SPEC [--coordinator ADDR] [--id N] [--host H] [--advertise A] [--port P]\n"
    "  worker --spec SPEC [--coordinator ADDR] --id N\n"
    "      single roles, for cluster deployments (docs/deploy.md). --host: the address to bind\n"
    "      (default cluster.host, else 0.0.0.0); --advertise: the address peers dial (default:\n"
    "      the bound host, or for 0.0.0.0 this host's first non-loopback IPv4 address).\n"
    "      ADDR (host:port, a DNS name allowed): --coordinator, else $ECPS_COORDINATOR, else\n"
    "      cluster.coordinator. A role keeps trying to reach the coordinator for\n"
    "      cluster.connect_timeout_s, so the roles may start in any order.\n"
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

// The address a single role binds: --host, else cluster.host, else every interface (a role
// started by hand or by a scheduler is there to be reached from other hosts).
std::string BindHost(const Args& a, const JobSpec& spec) {
  if (a.Has("host")) return a.Get("host");
  return spec.cluster.host.empty() ? "0.0.0.0" : spec.cluster.host;
}

// The coordinator a server or worker dials: --coordinator, $ECPS_COORDINATOR, then
// cluster.coordinator. Prints the error and returns false when none is set or it is bad.
bool CoordinatorAddress(const Args& a, const std::string& role, const JobSpec& spec,
                        std::string* out) {
  const char* env = std::getenv("ECPS_COORDINATOR");
  std::string from;
  if (a.Has("coordinator")) {
    *out = a.Get("coordinator");
    from = "--coordinator";
  } else if (env != nullptr && *env != '\0') {
    *out = env;
    from = "ECPS_COORDINATOR";
  } else {
    *out = spec.cluster.coordinator;
    from = "cluster.coordinator";
  }
  if (out->empty()) {
    UsageError(role + " needs the coordinator's address: --coordinator HOST:PORT, "
               "ECPS_COORDINATOR or cluster.coordinator in the spec");
    return false;
  }
  if (absl::Status s = CheckDialAddress(*out); !s.ok()) {
    std::fprintf(stderr, "ecps %s: %s: %s\n", role.c_str(), from.c_str(),
                 std::string(s.message()).c_str());
    return false;
  }
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
    if (!a.Only({"output", "no-progress", "backend"})) return UsageError(a.error);
    if (a.positional.size() != 1) return UsageError("run takes exactly one SPEC.yaml");
    RunFlags flags;
    flags.backend = a.Get("backend", "local");
    flags.spec_path = a.positional[0];
    flags.output_dir = a.Get("output");
    flags.progress = !a.Has("no-progress");
    return RunJob(flags);
  }
  if (command == "slurm") {
    if (!a.Only({"output", "script"})) return UsageError(a.error);
    // -o FILE (the script) reads as two positional arguments here.
    std::vector<std::string> pos = a.positional;
    std::string script = a.Get("script");
    for (size_t i = 0; i < pos.size(); ++i) {
      if (pos[i] != "-o") continue;
      if (i + 1 == pos.size()) return UsageError("-o needs a file (or - for standard output)");
      script = pos[i + 1];
      pos.erase(pos.begin() + i, pos.begin() + i + 2);
      break;
    }
    if (pos.size() != 1) return UsageError("usage: ecps slurm SPEC.yaml [-o FILE] [--output DIR]");
    return RunSlurmCommand(pos[0], script, a.Get("output"));
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
    if (!a.Only({"spec", "host", "advertise", "port", "port-file", "address-file",
                 "final-status", "token", "log-level"})) {
      return UsageError(a.error);
    }
    CoordinatorOptions options;
    if (!LoadRole(a, "coordinator", &options.spec)) return 2;
    options.listen_host = BindHost(a, options.spec);
    options.advertise = a.Get("advertise", options.spec.cluster.advertise);
    options.address_file = a.Get("address-file");
    options.final_status_file = a.Get("final-status");
    if (!a.GetInt("port", options.spec.cluster.coordinator_port, &options.port)) {
      return UsageError(a.error);
    }
    options.port_file = a.Get("port-file");
    options.token = TokenFrom(a);
    return RunCoordinator(options);
  }
  if (command == "server") {
    if (!a.Only({"spec", "coordinator", "id", "host", "advertise", "port", "token",
                 "log-level"})) {
      return UsageError(a.error);
    }
    ServerOptions options;
    if (!LoadRole(a, "server", &options.spec)) return 2;
    if (!CoordinatorAddress(a, "server", options.spec, &options.coordinator)) return 2;
    options.listen_host = BindHost(a, options.spec);
    options.advertise = a.Get("advertise", options.spec.cluster.advertise);
    if (!a.GetInt("port", 0, &options.port) || !a.GetInt("id", -1, &options.requested_id)) {
      return UsageError(a.error);
    }
    options.token = TokenFrom(a);
    return RunServer(options);
  }
  if (command == "worker") {
    if (!a.Only({"spec", "coordinator", "id", "token", "log-level"})) return UsageError(a.error);
    WorkerOptions options;
    if (!a.Has("id")) return UsageError("worker needs --id N");
    if (!LoadRole(a, "worker", &options.spec)) return 2;
    if (!CoordinatorAddress(a, "worker", options.spec, &options.coordinator)) return 2;
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
