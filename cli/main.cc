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
#include "cli/command_options.h"
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

// A flag, else an environment variable, else `fallback`.
std::string FlagOrEnv(const std::optional<std::string>& flag, const char* env,
                      const std::string& fallback = "") {
  if (flag.has_value()) return *flag;
  const char* value = std::getenv(env);
  return value != nullptr && *value != '\0' ? value : fallback;
}

// --token, else $ECPS_TOKEN (set but empty counts: the role then refuses it).
std::string TokenFrom(const std::optional<std::string>& flag) {
  if (flag.has_value()) return *flag;
  const char* env = std::getenv("ECPS_TOKEN");
  return env == nullptr ? "" : env;
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
bool UseOperatorCredentials(const std::string& command, const OperatorOptions& o,
                            const TlsFiles& job_tls, Target* out) {
  TlsFiles tls{FlagOrEnv(o.tls_ca, "ECPS_TLS_CA", job_tls.ca),
               FlagOrEnv(o.tls_cert, "ECPS_TLS_CERT", job_tls.cert),
               FlagOrEnv(o.tls_key, "ECPS_TLS_KEY", job_tls.key)};
  if (absl::Status s = UseTlsFiles(tls, Role::kAdmin); !s.ok()) {
    std::fprintf(stderr, "ecps %s: %s\n", command.c_str(), std::string(s.message()).c_str());
    return false;
  }
  absl::StatusOr<std::string> token = PresentedToken(out->token, Role::kAdmin);
  if (!token.ok()) {
    std::fprintf(stderr, "ecps %s: %s\n", command.c_str(),
                 std::string(token.status().message()).c_str());
    return false;
  }
  out->token = *token;
  return true;
}
// --job DIR's coordinator and token, unless ADDR is given too (one operand more than
// `operands`). Prints the error and returns false.
bool TargetFromJob(const std::string& command, const OperatorOptions& o, size_t operands,
                   std::vector<std::string>* pos, TlsFiles* job_tls, Target* out) {
  auto job = ReadJobDir(*o.job);
  if (!job.ok()) {
    std::fprintf(stderr, "ecps %s: %s\n", command.c_str(),
                 std::string(job.status().message()).c_str());
    return false;
  }
  out->token = o.token.value_or(job->token);
  *job_tls = job->tls;
  if (pos->size() == operands + 1) {
    out->address = (*pos)[0];
    pos->erase(pos->begin());
  } else if (job->address.empty()) {
    std::fprintf(stderr, "ecps %s: %s has no coordinator.address (the job has not started "
                 "listening yet?)\n", command.c_str(), o.job->c_str());
    return false;
  } else {
    out->address = job->address;
  }
  return true;
}
bool ResolveTarget(const std::string& command, const OperatorOptions& o, size_t operands,
                   Target* out) {
  std::vector<std::string> pos = o.operands;
  TlsFiles job_tls;
  if (o.job.has_value()) {
    if (!TargetFromJob(command, o, operands, &pos, &job_tls, out)) return false;
  } else {
    if (pos.empty()) {
      UsageError(command, command + " needs ADDR (host:port) or --job DIR");
      return false;
    }
    out->address = pos[0];
    pos.erase(pos.begin());
    out->token = TokenFrom(o.token);
  }
  if (pos.size() != operands) {
    UsageError(command, operands == 2
                            ? "usage: ecps kill ADDR|--job DIR server|worker N"
                            : command + " takes ADDR or --job DIR and no other argument");
    return false;
  }
  out->operands = pos;
  return UseOperatorCredentials(command, o, job_tls, out);
}

// The address a single role binds: --host, else cluster.host, else every interface (a role
// started by hand or by a scheduler is there to be reached from other hosts).
std::string BindHost(const RoleOptions& o, const JobSpec& spec) {
  if (o.host.has_value()) return *o.host;
  return spec.cluster.host.empty() ? "0.0.0.0" : spec.cluster.host;
}

// The coordinator a server or worker dials: --coordinator, $ECPS_COORDINATOR, then
// cluster.coordinator, then what --coordinator-file names now (it is read again whenever the
// coordinator stops answering: *file). Prints the error and returns false when none is set
// or it is bad.
bool CoordinatorAddress(const std::string& role, const DialingRoleOptions& o,
                        const JobSpec& spec, std::string* out, std::string* file) {
  const char* env = std::getenv("ECPS_COORDINATOR");
  *file = o.coordinator_file;
  std::string from;
  if (o.coordinator.has_value()) {
    *out = *o.coordinator;
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

// A single role takes no operands. Prints the usage error and returns false.
bool FlagsOnly(const std::string& role, const RoleOptions& o) {
  if (o.operands.empty()) return true;
  UsageError(role, role + " takes flags only, not '" + o.operands[0] + "'");
  return false;
}

// Loads the spec and sets up logging for a single role. Prints the error and returns false.
bool LoadRole(const std::string& role, const RoleOptions& o, JobSpec* spec) {
  if (o.spec.empty()) {
    UsageError(role, role + " needs --spec");
    return false;
  }
  auto loaded = LoadSpecFile(o.spec);
  if (!loaded.ok()) {
    std::fprintf(stderr, "ecps %s: invalid spec:\n%s\n", role.c_str(),
                 std::string(loaded.status().message()).c_str());
    return false;
  }
  *spec = std::move(*loaded);
  const std::string level =
      o.log_level.has_value() ? LogLevelName(*o.log_level) : spec->monitoring.log_level;
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
bool UseRoleCredentials(const std::string& name, const JobSpec& spec, Role role,
                        std::string* token) {
  if (absl::Status s = UseSpecTls(spec.security.tls, role); !s.ok()) {
    std::fprintf(stderr, "ecps %s: %s\n", name.c_str(), std::string(s.message()).c_str());
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
    std::fprintf(stderr, "ecps %s: %s\n", name.c_str(), std::string(checked.message()).c_str());
    return false;
  }
  return true;
}

int Run(const RunOptions& o) {
  if (o.operands.size() != 1) return UsageError("run", "run takes exactly one SPEC.yaml");
  RunFlags flags;
  flags.backend = o.backend;
  flags.spec_path = o.operands[0];
  flags.output_dir = o.output;
  flags.progress = !o.no_progress;
  return RunJob(flags);
}

// `ecps bench throughput|recovery SPEC.yaml`: `command` names it in the usage error.
int Bench(const std::string& command, const BenchOptions& o,
          int (*bench)(const std::string&, const std::string&)) {
  if (o.operands.size() != 1) {
    return UsageError(command, "usage: ecps " + command + " SPEC.yaml [--output DIR]");
  }
  return bench(o.operands[0], o.output);
}

int Export(const ExportOptions& o) {
  if (o.operands.size() != 1 || o.output.empty()) {
    return UsageError("export", "usage: ecps export CHECKPOINT -o DIR [--with-optimizer-state]");
  }
  return RunExportCommand(o.operands[0], o.output, o.with_optimizer_state);
}

// checkpoint, scrub and kill: the coordinator's address and the admin's credentials, then
// one RPC.
int Checkpoint(const OperatorOptions& o) {
  Target target;
  if (!ResolveTarget("checkpoint", o, 0, &target)) return 2;
  EndOperatorCommand(RunCheckpointCommand(target.address, target.token));
}
int Scrub(const OperatorOptions& o) {
  Target target;
  if (!ResolveTarget("scrub", o, 0, &target)) return 2;
  EndOperatorCommand(RunScrubCommand(target.address, target.token));
}
int Kill(const OperatorOptions& o) {
  Target target;
  if (!ResolveTarget("kill", o, 2, &target)) return 2;
  EndOperatorCommand(
      RunKillCommand(target.address, target.token, target.operands[0], target.operands[1]));
}
int Status(const StatusOptions& o) {
  Target target;
  if (!ResolveTarget("status", o, 0, &target)) return 2;
  EndOperatorCommand(
      RunStatusCommand(target.address, target.token, o.json, o.watch, o.interval_ms));
}

int Health(const HealthOptions& o) {
  if (o.operands.size() != 2) return UsageError("health", "usage: ecps health ADDR ROLE");
  const std::optional<Role> role = RoleFromName(o.operands[1]);
  if (!role.has_value() || *role == Role::kAdmin) {
    return UsageError("health",
                      "ROLE must be coordinator, server or worker, not '" + o.operands[1] + "'");
  }
  // ROLE's own certificate: the one a probe inside ROLE's pod has (no ECPS_TLS_*: those
  // name the operators' admin certificate).
  const TlsFiles files{o.tls_ca, o.tls_cert, o.tls_key};
  std::optional<TlsIdentity> tls;
  if (!files.ca.empty() || !files.cert.empty() || !files.key.empty()) {
    if (files.ca.empty() || files.cert.empty() || files.key.empty()) {
      return UsageError("health", "TLS needs all three of --tls-ca, --tls-cert and --tls-key");
    }
    absl::StatusOr<TlsIdentity> loaded = LoadTlsIdentity(files, *role);
    if (!loaded.ok()) {
      std::fprintf(stderr, "ecps health: %s\n", std::string(loaded.status().message()).c_str());
      return 2;
    }
    tls = *std::move(loaded);
  }
  EndOperatorCommand(RunHealthCommand(o.operands[0], *role, o.service, o.deadline_ms,
                                      tls.has_value() ? &*tls : nullptr));
}

int Slurm(const SlurmOptions& o) {
  if (o.operands.size() != 1) {
    return UsageError("slurm", "usage: ecps slurm SPEC.yaml [-o FILE] [--output DIR]");
  }
  return RunSlurmCommand(o.operands[0], o.script, o.output);
}

int K8s(const K8sOptions& o) {
  if (o.operands.size() != 1) return UsageError("k8s", "usage: ecps k8s SPEC.yaml [-o DIR]");
  return RunK8sCommand(o.operands[0], o.dir);
}

int Coordinator(const CoordinatorRoleOptions& o) {
  CoordinatorOptions options;
  if (!FlagsOnly("coordinator", o)) return 2;
  if (!LoadRole("coordinator", o, &options.spec)) return 2;
  options.listen_host = BindHost(o, options.spec);
  options.advertise = o.advertise.value_or(options.spec.cluster.advertise);
  options.address_file = o.address_file;
  options.final_status_file = o.final_status;
  options.state_dir = o.state_dir;
  options.port = o.port.value_or(options.spec.cluster.coordinator_port);
  options.linger_ms = o.linger_ms.value_or(options.linger_ms);
  if (options.linger_ms < -1) return UsageError("coordinator", "--linger-ms must be -1 or more");
  options.port_file = o.port_file;
  options.token = TokenFrom(o.token);
  if (options.token.empty()) options.token = options.spec.job.token;
  if (!UseRoleCredentials("coordinator", options.spec, Role::kCoordinator, &options.token)) {
    return 2;
  }
  return RunCoordinator(options);
}

int Server(const ServerRoleOptions& o) {
  ServerOptions options;
  if (!FlagsOnly("server", o)) return 2;
  if (!LoadRole("server", o, &options.spec)) return 2;
  if (!CoordinatorAddress("server", o, options.spec, &options.coordinator,
                          &options.coordinator_file)) {
    return 2;
  }
  options.listen_host = BindHost(o, options.spec);
  options.advertise = o.advertise.value_or(options.spec.cluster.advertise);
  options.port = o.port;
  options.requested_id = o.id.value_or(-1);
  options.token = TokenFrom(o.token);
  if (!UseRoleCredentials("server", options.spec, Role::kServer, &options.token)) return 2;
  return RunServer(options);
}

int Worker(const WorkerRoleOptions& o) {
  WorkerOptions options;
  if (!FlagsOnly("worker", o)) return 2;
  if (!o.id.has_value()) return UsageError("worker", "worker needs --id N");
  if (!LoadRole("worker", o, &options.spec)) return 2;
  if (!CoordinatorAddress("worker", o, options.spec, &options.coordinator,
                          &options.coordinator_file)) {
    return 2;
  }
  options.id = *o.id;
  if (options.id < 0 || options.id >= options.spec.cluster.workers) {
    return UsageError("worker", "--id must be in [0, cluster.workers)");
  }
  options.listen_host = BindHost(o, options.spec);
  options.port = o.port;
  options.token = TokenFrom(o.token);
  if (!UseRoleCredentials("worker", options.spec, Role::kWorker, &options.token)) return 2;
  return RunWorker(options);
}

// Every command's handler, each reached from the subcommand that parsed.
CommandHandlers Handlers() {
  CommandHandlers h;
  h.run = Run;
  h.bench_throughput = [](const BenchOptions& o) {
    return Bench("bench throughput", o, RunThroughputBench);
  };
  h.bench_recovery = [](const BenchOptions& o) {
    return Bench("bench recovery", o, RunRecoveryBench);
  };
  h.checkpoint = Checkpoint;
  h.export_checkpoint = Export;
  h.scrub = Scrub;
  h.status = Status;
  h.kill = Kill;
  h.health = Health;
  h.slurm = Slurm;
  h.k8s = K8s;
  h.coordinator = Coordinator;
  h.server = Server;
  h.worker = Worker;
  return h;
}

int Main(int argc, char** argv) {
  absl::StatusOr<ParsedCommand> parsed =
      ParseCommandLine(std::vector<std::string>(argv, argv + argc), BindCommands(Handlers()));
  if (!parsed.ok()) {
    // The help of the command the error is about: argv[1] when it names one.
    return UsageError(argc > 1 ? argv[1] : "", std::string(parsed.status().message()));
  }
  if (!parsed->help.empty()) {
    std::printf("%s", parsed->help.c_str());
    return 0;
  }
  return parsed->run();
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
