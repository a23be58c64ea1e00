// The commands of `ecps` and their flags: the one definition cli/command_line.cc parses and
// renders as help. Each flag's type, and the field it fills, is in cli/command_options.cc.
#include "cli/command_line.h"

namespace ecps {
namespace {

const FlagSpec kToken = {"token", "T", "the job token (default: $ECPS_TOKEN; with --job, DIR/token)"};
const FlagSpec kJob = {"job", "DIR",
                       "the output folder of `ecps run`: the coordinator's address and the "
                       "job token are read from it"};
// An operator command's TLS files (the admin's), when the job uses security.tls.
const FlagSpec kTlsCa = {"tls-ca", "F", "the job's CA certificate (default: $ECPS_TLS_CA; with --job, "
                                        "from DIR/tls)"};
const FlagSpec kTlsCert = {"tls-cert", "F", "an admin certificate (CN=admin; default: $ECPS_TLS_CERT)"};
const FlagSpec kTlsKey = {"tls-key", "F", "its private key (default: $ECPS_TLS_KEY)"};
const FlagSpec kLogLevel = {"log-level", "L", "trace|debug|info|warn|error (default: "
                                              "monitoring.log_level)"};
const FlagSpec kSpec = {"spec", "SPEC", "the job spec (YAML)"};
const FlagSpec kHost = {"host", "H", "the address to bind (default: cluster.host, else 0.0.0.0)"};
const FlagSpec kAdvertise = {"advertise", "A",
                             "the address peers dial (default: the bound host, or for 0.0.0.0 "
                             "this host's first non-loopback IPv4 address)"};
const FlagSpec kCoordinator = {"coordinator", "ADDR",
                               "the coordinator (host:port, or with standbys every "
                               "coordinator's, comma-separated; default: $ECPS_COORDINATOR, else "
                               "cluster.coordinator)"};
const FlagSpec kCoordinatorFile = {
    "coordinator-file", "F",
    "the file the coordinator writes its address into (its --address-file, on a folder "
    "every node sees): read again whenever the coordinator stops answering, so a coordinator "
    "relaunched elsewhere is found; the address when none of the above is set"};
const FlagSpec kOutput = {"output", "DIR", "the job's folder (default: job.output_dir)"};

// Jobs run from this machine: a whole job, and benchmarks that compare runs of one.
std::vector<CommandSpec> LocalJobCommands() {
  return {
      {"run",
       "SPEC.yaml [--output DIR] [--no-progress] [--backend local|slurm]",
       "start a whole job on this machine (coordinator, servers, workers), train, report;\n"
       "      --backend slurm: the roles as job steps of the Slurm allocation it runs in",
       {kOutput,
        {"no-progress", "", "no live progress line"},
        {"backend", "local|slurm",
         "local: child processes (default); slurm: job steps of the allocation it runs in"}}},
      {"bench", "throughput|recovery SPEC.yaml [--output DIR]",
       "compare runs of the same job (throughput, recovery)", {}},
      {"bench throughput", "SPEC.yaml [--output DIR]",
       "the same job in-process (no servers) and under `ecps run`; prints the ratio",
       {kOutput}},
      {"bench recovery", "SPEC.yaml [--output DIR]",
       "the same failure under erasure_code, replication and checkpoint; a report",
       {{"output", "DIR", "where the runs and the report go (default: job.output_dir/"
                          "bench-recovery)"}}},
  };
}

// What an operator runs beside a job: on a running one (through its coordinator), on a
// checkpoint it wrote, or a probe of one of its roles.
std::vector<CommandSpec> OperatorCommands() {
  return {
      {"checkpoint", "ADDR | --job DIR",
       "save a checkpoint of a running job now (to fault_tolerance.checkpoint.dir)",
       {kToken, kJob, kTlsCa, kTlsCert, kTlsKey}},
      {"export", "CHECKPOINT -o DIR [--with-optimizer-state]",
       "write a checkpoint as a serving stack loads it: the model as ONNX, the tables as\n"
       "      safetensors, manifest.json (docs/model.md); CHECKPOINT: a step-N folder or a\n"
       "      checkpoint root (its newest)",
       {{"output", "DIR", "the folder to write (must not exist, or be empty)", 'o'},
        {"with-optimizer-state", "",
         "also the optimizer state (tables' and dense tensors'), to train on elsewhere"}}},
      {"scrub", "ADDR | --job DIR",
       "check every stripe's parity and every dense replica of a running job",
       {kToken, kJob, kTlsCa, kTlsCert, kTlsKey}},
      {"status", "ADDR | --job DIR [--json] [--watch] [--interval-ms N]",
       "show a running job",
       {{"json", "", "the status as JSON"},
        {"watch", "", "redraw until the job ends"},
        {"interval-ms", "N", "how often --watch redraws (default 1000)"},
        kToken,
        kJob,
        kTlsCa,
        kTlsCert,
        kTlsKey}},
      {"kill", "ADDR | --job DIR server|worker N",
       "admin drill: the node holding that id kills itself (SIGKILL)",
       {kToken, kJob, kTlsCa, kTlsCert, kTlsKey}},
      {"health", "ADDR ROLE [--service S] [--deadline-ms N] [--tls-ca F --tls-cert F --tls-key F]",
       "ask the ROLE (coordinator|server|worker) at ADDR how it is, once: grpc.health.v1;\n"
       "      exit 0 when SERVING. `ecps k8s` runs it as the probe of a job with security.tls",
       {{"service", "S",
         "what to ask about (default \"\": the process; ecps.v1.Coordinator, "
         "ecps.v1.ParameterServer: readiness)"},
        {"deadline-ms", "N", "how long to wait for the answer (default 4000)"},
        {"tls-ca", "F", "the job's CA certificate (a job with security.tls answers only TLS)"},
        {"tls-cert", "F", "a certificate of ROLE (CN=ROLE; in ROLE's pod, the pod's own)"},
        {"tls-key", "F", "its private key"}}},
  };
}

// Writers of the files another system deploys a job with.
std::vector<CommandSpec> DeploymentCommands() {
  return {
      {"slurm", "SPEC.yaml [-o FILE] [--output DIR]",
       "write an sbatch script that runs the job under Slurm (docs/deploy.md); default\n"
       "      FILE: DIR/<job name>.sbatch, DIR the job's folder (job.output_dir); -o - prints it",
       {{"script", "FILE", "where the script goes (- for standard output)", 'o'}, kOutput}},
      {"k8s", "SPEC.yaml [-o DIR]",
       "write the Kubernetes manifests of the job (the spec's k8s: section; docs/deploy.md),\n"
       "      one file per object, for `kubectl apply -f DIR`; default DIR: job.output_dir/k8s",
       {{"dir", "DIR", "where the files go (default: job.output_dir/k8s)", 'o'}}},
  };
}

// The single roles of a cluster deployment.
std::vector<CommandSpec> RoleCommands() {
  return {
      {"coordinator",
       "--spec SPEC [--host H] [--advertise A] [--port P] [--port-file F]\n"
       "              [--address-file F] [--final-status F] [--state-dir DIR] [--linger-ms N]",
       "the coordinator of a cluster deployment (docs/deploy.md)",
       {kSpec, kHost, kAdvertise,
        {"port", "P", "the port to listen on (default: cluster.coordinator_port; 0: any)"},
        {"port-file", "F", "write the port it listens on here"},
        {"address-file", "F", "write the address it advertises (host:port) here"},
        {"final-status", "F", "leave the job's last status here as JSON"},
        {"state-dir", "DIR",
         "keep the coordinator's state here; a coordinator started on a folder with state "
         "takes the job over (docs/recovery.md)"},
        {"linger-ms", "N",
         "keep serving the status N ms after the job ended, then exit (default 2000); -1: "
         "until SIGTERM (under a supervisor that restarts what exits, as Kubernetes does)"},
        kToken, kLogLevel}},
      {"server",
       "--spec SPEC [--coordinator ADDR] [--coordinator-file F] [--id N] [--host H]\n"
       "              [--advertise A] [--port P]",
       "a parameter server of a cluster deployment (docs/deploy.md)",
       {kSpec, kCoordinator, kCoordinatorFile,
        {"id", "N", "the server slot to take (default: any free one; -1: a spare)"},
        kHost, kAdvertise,
        {"port", "P", "the port to listen on (default 0: any)"},
        kToken, kLogLevel}},
      {"worker",
       "--spec SPEC [--coordinator ADDR] [--coordinator-file F] --id N [--host H] [--port P]",
       "a worker of a cluster deployment (docs/deploy.md)",
       {kSpec, kCoordinator, kCoordinatorFile,
        {"id", "N", "the worker's id, in [0, cluster.workers)"}, kHost,
        {"port", "P", "the port of its gRPC health service (default 0: any)"}, kToken,
        kLogLevel}},
  };
}

}  // namespace

const std::vector<CommandSpec>& CommandTable() {
  static const std::vector<CommandSpec>* const table = [] {
    auto* all = new std::vector<CommandSpec>;
    for (const std::vector<CommandSpec>& family :
         {LocalJobCommands(), OperatorCommands(), DeploymentCommands(), RoleCommands()}) {
      all->insert(all->end(), family.begin(), family.end());
    }
    return all;
  }();
  return *table;
}

const std::string& CommandNotes() {
  static const std::string* const notes = new std::string(
      "The single roles (coordinator, server, worker) are for cluster deployments\n"
      "(docs/deploy.md). --host: the address to bind (default cluster.host, else 0.0.0.0);\n"
      "--advertise: the address peers dial (default: the bound host, or for 0.0.0.0 this\n"
      "host's first non-loopback IPv4 address). ADDR (host:port, a DNS name allowed):\n"
      "--coordinator, else $ECPS_COORDINATOR, else cluster.coordinator. A role keeps trying\n"
      "to reach the coordinator for cluster.connect_timeout_s, so the roles may start in any\n"
      "order. With --coordinator-file F (the coordinator's --address-file) a role that loses\n"
      "its coordinator reads F again, and finds one relaunched at another address.\n"
      "\n"
      "Every role takes --token T (default: $ECPS_TOKEN) and --log-level L. The operator\n"
      "commands (checkpoint, scrub, status, kill) take --job DIR instead of ADDR: the output\n"
      "folder of `ecps run`, which holds the coordinator's address and the job token (DIR/token,\n"
      "mode 0600); --token or ECPS_TOKEN, when set, are used instead of DIR/token.\n"
      "Credentials (docs/security.md): the coordinator and the servers take the job secret;\n"
      "a worker its role token (or the secret); operator commands the admin token (DIR/token).\n"
      "With security.tls every role uses its certificate from the spec, and the operator\n"
      "commands an admin certificate: --tls-ca/--tls-cert/--tls-key, ECPS_TLS_*, or DIR/tls.\n"
      "\n"
      "`ecps help CMD` or `ecps CMD --help` describes one command and its flags.\n");
  return *notes;
}

}  // namespace ecps
