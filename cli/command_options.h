// The typed options of every `ecps` command, and which handler each command calls with
// them. The flags' names, help and value texts are in the command table
// (cli/command_table.cc); here each one gets its type: a switch is a bool, a number an int,
// a closed set (--backend, --log-level) an enum, and a flag whose absence means "fall back
// to the environment or the spec" a std::optional. A family of commands shares one struct
// (the operator commands their target and credentials, the roles their spec, token and log
// level).
#ifndef ECPS_CLI_COMMAND_OPTIONS_H_
#define ECPS_CLI_COMMAND_OPTIONS_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cli/command_line.h"
#include "cli/launcher.h"

namespace ecps {

// `ecps run SPEC.yaml`.
struct RunOptions {
  std::vector<std::string> operands;  // SPEC.yaml
  std::string output;                 // --output; empty: job.output_dir
  bool no_progress = false;
  LaunchBackendKind backend = LaunchBackendKind::kLocal;
};

// `ecps bench throughput|recovery SPEC.yaml`.
struct BenchOptions {
  std::vector<std::string> operands;  // SPEC.yaml
  std::string output;
};

// `ecps export CHECKPOINT -o DIR`.
struct ExportOptions {
  std::vector<std::string> operands;  // CHECKPOINT
  std::string output;                 // required; checked by the handler
  bool with_optimizer_state = false;
};

// `ecps slurm SPEC.yaml` and `ecps k8s SPEC.yaml`: a file (or folder) written from a spec.
struct SlurmOptions {
  std::vector<std::string> operands;  // SPEC.yaml
  std::string script;                 // -o; empty: DIR/<job name>.sbatch
  std::string output;
};
struct K8sOptions {
  std::vector<std::string> operands;  // SPEC.yaml
  std::string dir;                    // -o; empty: job.output_dir/k8s
};

// What every operator command (checkpoint, scrub, status, kill) takes: the coordinator, as
// ADDR (the first operand) or --job DIR, and the admin's credentials. An absent flag falls
// back to its environment variable, then to the job folder.
struct OperatorOptions {
  std::vector<std::string> operands;  // [ADDR] and the command's own (kill: server|worker N)
  std::optional<std::string> token;
  std::optional<std::string> job;
  std::optional<std::string> tls_ca;
  std::optional<std::string> tls_cert;
  std::optional<std::string> tls_key;
};
struct StatusOptions : OperatorOptions {
  bool json = false;
  bool watch = false;
  int interval_ms = 1000;
};

// `ecps health ADDR ROLE`: ROLE's own certificate, never the operators' (no fallback).
struct HealthOptions {
  std::vector<std::string> operands;  // ADDR ROLE
  std::string service;
  int deadline_ms = 4000;
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
};

// --log-level: the levels monitoring.log_level takes.
enum class LogLevel { kTrace, kDebug, kInfo, kWarn, kError };
// "trace" ... "error", as spdlog and the spec name them.
std::string LogLevelName(LogLevel level);

// What every single role (coordinator, server, worker) takes. An absent flag falls back to
// the environment, then to the spec.
struct RoleOptions {
  std::vector<std::string> operands;  // none are taken; the handler refuses them
  std::string spec;                   // required; checked by the handler
  std::optional<std::string> token;
  std::optional<LogLevel> log_level;
  std::optional<std::string> host;
};
struct CoordinatorRoleOptions : RoleOptions {
  std::optional<std::string> advertise;
  std::optional<int> port;       // absent: cluster.coordinator_port
  std::optional<int> linger_ms;  // absent: the coordinator's default
  std::string port_file;
  std::string address_file;
  std::string final_status;
  std::string state_dir;
};
// A server or a worker: a role that dials the coordinator.
struct DialingRoleOptions : RoleOptions {
  std::optional<std::string> coordinator;
  std::string coordinator_file;
  std::optional<int> id;  // server: absent takes any free slot; worker: required
  int port = 0;
};
struct ServerRoleOptions : DialingRoleOptions {
  std::optional<std::string> advertise;
};
using WorkerRoleOptions = DialingRoleOptions;

// The handler of each command: called with the command's options once they are parsed,
// returns the process's exit code. A handler left empty makes its command "not implemented".
struct CommandHandlers {
  std::function<int(const RunOptions&)> run;
  std::function<int(const BenchOptions&)> bench_throughput;
  std::function<int(const BenchOptions&)> bench_recovery;
  std::function<int(const OperatorOptions&)> checkpoint;
  std::function<int(const ExportOptions&)> export_checkpoint;
  std::function<int(const OperatorOptions&)> scrub;
  std::function<int(const StatusOptions&)> status;
  std::function<int(const OperatorOptions&)> kill;
  std::function<int(const HealthOptions&)> health;
  std::function<int(const SlurmOptions&)> slurm;
  std::function<int(const K8sOptions&)> k8s;
  std::function<int(const CoordinatorRoleOptions&)> coordinator;
  std::function<int(const ServerRoleOptions&)> server;
  std::function<int(const WorkerRoleOptions&)> worker;
};

// Every command of the table with its options bound and its handler, for ParseCommandLine.
CommandBindings BindCommands(const CommandHandlers& handlers);

}  // namespace ecps

#endif  // ECPS_CLI_COMMAND_OPTIONS_H_
