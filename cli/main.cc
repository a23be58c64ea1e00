// ecps: one binary, one subcommand per role (see `ecps help`).
#include <malloc.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "cli/bench_command.h"
#include "cli/checkpoint_command.h"
#include "cli/export_command.h"
#include "cli/command_line.h"
#include "cli/health_command.h"
#include "cli/job_dir.h"
#include "cli/k8s_manifests.h"
#include "cli/kill_command.h"
#include "cli/launcher.h"
#include "cli/role_security.h"
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
#if ECPS_HAS_ASAN || defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

namespace ecps {
namespace {

using Args = ParsedCommand;

// An operator command (status, scrub, kill, checkpoint, health) ends here, without the
// exit-time handlers. A command that gave up on its coordinator (refused TLS, nobody
// listening) leaves gRPC retrying that connection on gRPC's own threads; OpenSSL's exit-time
// cleanup would free the tables a handshake there is reading, and the process would die of
// SIGSEGV after printing its answer. Nothing of the command is left to flush but stdio.
[[noreturn]] void EndOperatorCommand(int exit_code) {
#if ECPS_HAS_ASAN || defined(__SANITIZE_ADDRESS__)
  __lsan_do_leak_check();  // what the skipped exit handlers would have checked
#endif
  std::cout.flush();
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(exit_code);
}

// A command line that does not fit its command: the message, then that command's help.
int UsageError(const std::string& command, const std::string& message) {
  std::fprintf(stderr, "ecps: %s\n\n%s", message.c_str(), CommandHelp(command).c_str());
  return 2;
}

std::string TokenFrom(const Args& a) {
  if (a.Has("token")) return a.Get("token");
  const char* env = std::getenv("ECPS_TOKEN");
  return env == nullptr ? "" : env;
}

// A flag, else an environment variable, else `fallback`.
std::string FlagOrEnv(const Args& a, const std::string& flag, const char* env,
                      const std::string& fallback = "") {
  if (a.Has(flag)) return a.Get(flag);
  const char* value = std::getenv(env);
  return value != nullptr && *value != '\0' ? value : fallback;
}

// The coordinator and token an operator command talks to: ADDR (the first operand) or
// --job DIR's address, and --token, DIR/token or ECPS_TOKEN, in that order; with TLS, the
// admin certificate from --tls-*, ECPS_TLS_* or the job folder. `operands` are the operands
// after ADDR. Prints the error and returns false.
struct Target {
  std::string address;
  std::string token;
  std::vector<std::string> operands;
};
bool UseOperatorCredentials(const Args& a, const TlsFiles& job_tls, Target* out) {
  TlsFiles tls{FlagOrEnv(a, "tls-ca", "ECPS_TLS_CA", job_tls.ca),
               FlagOrEnv(a, "tls-cert", "ECPS_TLS_CERT", job_tls.cert),
               FlagOrEnv(a, "tls-key", "ECPS_TLS_KEY", job_tls.key)};
  if (absl::Status s = UseTlsFiles(tls, Role::kAdmin); !s.ok()) {
    std::fprintf(stderr, "ecps %s: %s\n", a.command.c_str(), std::string(s.message()).c_str());
    return false;
  }
  absl::StatusOr<std::string> token = PresentedToken(out->token, Role::kAdmin);
  if (!token.ok()) {
    std::fprintf(stderr, "ecps %s: %s\n", a.command.c_str(),
                 std::string(token.status().message()).c_str());
    return false;
  }
  out->token = *token;
  return true;
}
bool ResolveTarget(const Args& a, size_t operands, Target* out) {
  const std::string& command = a.command;
  std::vector<std::string> pos = a.operands;
  TlsFiles job_tls;
  if (a.Has("job")) {
    auto job = ReadJobDir(a.Get("job"));
    if (!job.ok()) {
      std::fprintf(stderr, "ecps %s: %s\n", command.c_str(),
                   std::string(job.status().message()).c_str());
      return false;
    }
    out->token = a.Has("token") ? a.Get("token") : job->token;
    job_tls = job->tls;
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
      UsageError(command, command + " needs ADDR (host:port) or --job DIR");
      return false;
    }
    out->address = pos[0];
    pos.erase(pos.begin());
    out->token = TokenFrom(a);
  }
  if (pos.size() != operands) {
    UsageError(command, command == "kill"
                            ? "usage: ecps kill ADDR|--job DIR server|worker N"
                            : command + " takes ADDR or --job DIR and no other argument");
    return false;
  }
  out->operands = pos;
  return UseOperatorCredentials(a, job_tls, out);
}

// The address a single role binds: --host, else cluster.host, else every interface (a role
// started by hand or by a scheduler is there to be reached from other hosts).
std::string BindHost(const Args& a, const JobSpec& spec) {
  if (a.Has("host")) return a.Get("host");
  return spec.cluster.host.empty() ? "0.0.0.0" : spec.cluster.host;
}

// The coordinator a server or worker dials: --coordinator, $ECPS_COORDINATOR, then
// cluster.coordinator, then what --coordinator-file names now (it is read again whenever the
// coordinator stops answering: *file). Prints the error and returns false when none is set
// or it is bad.
bool CoordinatorAddress(const Args& a, const JobSpec& spec, std::string* out, std::string* file) {
  const std::string& role = a.command;
  const char* env = std::getenv("ECPS_COORDINATOR");
  *file = a.Get("coordinator-file");
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
  if (out->empty() && !file->empty()) {
    std::ifstream f(*file);
    std::getline(f, *out);
    from = "--coordinator-file " + *file;
  }
  if (out->empty()) {
    UsageError(role, role + " needs the coordinator's address: --coordinator HOST:PORT, "
                            "ECPS_COORDINATOR, cluster.coordinator in the spec, or a "
                            "--coordinator-file that holds it");
    return false;
  }
  // One address, or the coordinator's and its standbys' (coordinator.replicas).
  if (auto s = SplitDialAddresses(*out); !s.ok()) {
    std::fprintf(stderr, "ecps %s: %s: %s\n", role.c_str(), from.c_str(),
                 std::string(s.status().message()).c_str());
    return false;
  }
  return true;
}

// Loads the spec and sets up logging for a single role.
bool LoadRole(const Args& a, JobSpec* spec) {
  const std::string& role = a.command;
  if (!a.Has("spec")) {
    UsageError(role, role + " needs --spec");
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

// A role's credentials: with security.tls its certificate becomes this process's; `token`
// (--token or ECPS_TOKEN) is checked and turned into what the role presents. The coordinator
// and the servers keep the job secret (they check every role's tokens); a worker presents
// its role token. Prints the error and returns false.
bool UseRoleCredentials(const Args& a, const JobSpec& spec, Role role, std::string* token) {
  if (absl::Status s = UseSpecTls(spec.security.tls, role); !s.ok()) {
    std::fprintf(stderr, "ecps %s: %s\n", a.command.c_str(), std::string(s.message()).c_str());
    return false;
  }
  absl::Status checked = absl::OkStatus();
  if (role == Role::kWorker) {
    absl::StatusOr<std::string> presented = PresentedToken(*token, role);
    if (presented.ok()) *token = *presented;
    checked = presented.status();
  } else {
    checked = CheckJobSecret(*token, role);
  }
  if (!checked.ok()) {
    std::fprintf(stderr, "ecps %s: %s\n", a.command.c_str(),
                 std::string(checked.message()).c_str());
    return false;
  }
  return true;
}

// Reads integer flag `flag` into *out (`fallback` when absent). Prints the usage error and
// returns false when it is not an integer.
bool IntFlag(const Args& a, const std::string& flag, int fallback, int* out) {
  absl::StatusOr<int> value = a.GetInt(flag, fallback);
  if (!value.ok()) {
    UsageError(a.command, std::string(value.status().message()));
    return false;
  }
  *out = *value;
  return true;
}

int Main(int argc, char** argv) {
  absl::StatusOr<Args> parsed = ParseCommandLine(std::vector<std::string>(argv, argv + argc));
  if (!parsed.ok()) {
    // The help of the command the error is about: argv[1] when it names one.
    return UsageError(argc > 1 ? argv[1] : "", std::string(parsed.status().message()));
  }
  const Args& a = *parsed;
  if (!a.help.empty()) {
    std::printf("%s", a.help.c_str());
    return 0;
  }
  const std::string& command = a.command;
  if (command == "run") {
    if (a.operands.size() != 1) return UsageError(command, "run takes exactly one SPEC.yaml");
    RunFlags flags;
    const std::string backend = a.Get("backend", "local");
    if (backend != "local" && backend != "slurm") {
      return UsageError(command, "--backend must be local or slurm, got '" + backend + "'");
    }
    flags.backend = backend == "slurm" ? LaunchBackendKind::kSlurm : LaunchBackendKind::kLocal;
    flags.spec_path = a.operands[0];
    flags.output_dir = a.Get("output");
    flags.progress = !a.Has("no-progress");
    return RunJob(flags);
  }
  if (command == "slurm") {
    if (a.operands.size() != 1) {
      return UsageError(command, "usage: ecps slurm SPEC.yaml [-o FILE] [--output DIR]");
    }
    return RunSlurmCommand(a.operands[0], a.Get("script"), a.Get("output"));
  }
  if (command == "k8s") {
    if (a.operands.size() != 1) return UsageError(command, "usage: ecps k8s SPEC.yaml [-o DIR]");
    return RunK8sCommand(a.operands[0], a.Get("dir"));
  }
  if (command == "bench throughput" || command == "bench recovery") {
    if (a.operands.size() != 1) {
      return UsageError(command, "usage: ecps " + command + " SPEC.yaml [--output DIR]");
    }
    if (command == "bench throughput") return RunThroughputBench(a.operands[0], a.Get("output"));
    return RunRecoveryBench(a.operands[0], a.Get("output"));
  }
  if (command == "export") {
    if (a.operands.size() != 1 || !a.Has("output")) {
      return UsageError(command, "usage: ecps export CHECKPOINT -o DIR [--with-optimizer-state]");
    }
    return RunExportCommand(a.operands[0], a.Get("output"), a.Has("with-optimizer-state"));
  }
  if (command == "checkpoint" || command == "scrub" || command == "kill") {
    Target target;
    if (!ResolveTarget(a, command == "kill" ? 2 : 0, &target)) return 2;
    if (command == "checkpoint") {
      EndOperatorCommand(RunCheckpointCommand(target.address, target.token));
    }
    if (command == "scrub") EndOperatorCommand(RunScrubCommand(target.address, target.token));
    EndOperatorCommand(
        RunKillCommand(target.address, target.token, target.operands[0], target.operands[1]));
  }
  if (command == "health") {
    if (a.operands.size() != 2) return UsageError(command, "usage: ecps health ADDR ROLE");
    const std::optional<Role> role = RoleFromName(a.operands[1]);
    if (!role.has_value() || *role == Role::kAdmin) {
      return UsageError(command,
                        "ROLE must be coordinator, server or worker, not '" + a.operands[1] + "'");
    }
    int deadline_ms = 4000;
    if (!IntFlag(a, "deadline-ms", 4000, &deadline_ms)) return 2;
    // ROLE's own certificate: the one a probe inside ROLE's pod has (no ECPS_TLS_*: those
    // name the operators' admin certificate).
    const TlsFiles files{a.Get("tls-ca"), a.Get("tls-cert"), a.Get("tls-key")};
    std::optional<TlsIdentity> tls;
    if (!files.ca.empty() || !files.cert.empty() || !files.key.empty()) {
      if (files.ca.empty() || files.cert.empty() || files.key.empty()) {
        return UsageError(command, "TLS needs all three of --tls-ca, --tls-cert and --tls-key");
      }
      absl::StatusOr<TlsIdentity> loaded = LoadTlsIdentity(files, *role);
      if (!loaded.ok()) {
        std::fprintf(stderr, "ecps health: %s\n", std::string(loaded.status().message()).c_str());
        return 2;
      }
      tls = *std::move(loaded);
    }
    EndOperatorCommand(RunHealthCommand(a.operands[0], *role, a.Get("service"), deadline_ms,
                                        tls.has_value() ? &*tls : nullptr));
  }
  if (command == "status") {
    Target target;
    if (!ResolveTarget(a, 0, &target)) return 2;
    int interval = 1000;
    if (!IntFlag(a, "interval-ms", 1000, &interval)) return 2;
    EndOperatorCommand(RunStatusCommand(target.address, target.token, a.Has("json"),
                                        a.Has("watch"), interval));
  }
  if (!a.operands.empty()) {
    return UsageError(command, command + " takes flags only, not '" + a.operands[0] + "'");
  }
  if (command == "coordinator") {
    CoordinatorOptions options;
    if (!LoadRole(a, &options.spec)) return 2;
    options.listen_host = BindHost(a, options.spec);
    options.advertise = a.Get("advertise", options.spec.cluster.advertise);
    options.address_file = a.Get("address-file");
    options.final_status_file = a.Get("final-status");
    options.state_dir = a.Get("state-dir");
    if (!IntFlag(a, "port", options.spec.cluster.coordinator_port, &options.port)) return 2;
    if (!IntFlag(a, "linger-ms", options.linger_ms, &options.linger_ms)) return 2;
    if (options.linger_ms < -1) return UsageError(command, "--linger-ms must be -1 or more");
    options.port_file = a.Get("port-file");
    options.token = TokenFrom(a);
    if (options.token.empty()) options.token = options.spec.job.token;
    if (!UseRoleCredentials(a, options.spec, Role::kCoordinator, &options.token)) return 2;
    return RunCoordinator(options);
  }
  if (command == "server") {
    ServerOptions options;
    if (!LoadRole(a, &options.spec)) return 2;
    if (!CoordinatorAddress(a, options.spec, &options.coordinator, &options.coordinator_file)) {
      return 2;
    }
    options.listen_host = BindHost(a, options.spec);
    options.advertise = a.Get("advertise", options.spec.cluster.advertise);
    if (!IntFlag(a, "port", 0, &options.port) || !IntFlag(a, "id", -1, &options.requested_id)) {
      return 2;
    }
    options.token = TokenFrom(a);
    if (!UseRoleCredentials(a, options.spec, Role::kServer, &options.token)) return 2;
    return RunServer(options);
  }
  if (command == "worker") {
    WorkerOptions options;
    if (!a.Has("id")) return UsageError(command, "worker needs --id N");
    if (!LoadRole(a, &options.spec)) return 2;
    if (!CoordinatorAddress(a, options.spec, &options.coordinator, &options.coordinator_file)) {
      return 2;
    }
    if (!IntFlag(a, "id", 0, &options.id)) return 2;
    if (options.id < 0 || options.id >= options.spec.cluster.workers) {
      return UsageError(command, "--id must be in [0, cluster.workers)");
    }
    options.listen_host = BindHost(a, options.spec);
    if (!IntFlag(a, "port", 0, &options.port)) return 2;
    options.token = TokenFrom(a);
    if (!UseRoleCredentials(a, options.spec, Role::kWorker, &options.token)) return 2;
    return RunWorker(options);
  }
  // The command table names a command this function does not run.
  return UsageError("", "command '" + command + "' is not implemented");
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
