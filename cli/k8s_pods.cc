#include "cli/k8s_pods.h"

#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli/k8s_manifests.h"
#include "runtime/net.h"

namespace ecps::k8s {
namespace {

// deploy/Containerfile's `ecps` group: a claim's files are made writable to it (fsGroup), so
// that the image's unprivileged user can write checkpoints, and a TLS Secret's files readable.
constexpr int kImageGid = 10001;
// A TLS Secret's files: 0440, readable by their owner and the fsGroup only (the key is the
// role's credential).
constexpr int kTlsFileMode = 0440;
// `ecps health`'s deadline in a TLS job's exec probes: within the probes' timeoutSeconds (5),
// so that a late answer is reported by ecps, not cut off by the kubelet.
constexpr int kExecProbeDeadlineMs = 4000;

// ECPS_TOKEN from the Secret: the job secret for the coordinator and the servers, which check
// every role's token; a worker's role token for the workers (docs/security.md).
EnvVar SecretEnv(const Names& n, PodRole role) {
  const char* key = role == PodRole::kWorker ? "worker-token" : "token";
  return EnvVar{.name = "ECPS_TOKEN",
                .value = SecretKeySelector{.name = n.token_secret, .key = key}};
}

EnvVar FieldEnv(const std::string& name, const std::string& field) {
  return EnvVar{.name = name, .value = ObjectFieldSelector{.field_path = field}};
}

// Requests and limits: CPU as a request only (a CPU limit throttles a server's RPC threads in
// bursts, which shows as latency on every worker's step), memory as request and limit (what a
// server holds is its share of the model: it must fit, and a node must not be overcommitted
// with it). GPUs (a GPU worker's) as a limit: Kubernetes takes a device plugin's resource as
// a limit only, the request following it.
std::optional<ResourceRequirements> Resources(const std::string& cpu, const std::string& memory,
                                              int gpus = 0) {
  if (cpu.empty() && memory.empty() && gpus == 0) return std::nullopt;
  ResourceRequirements resources;
  if (!cpu.empty()) resources.requests.emplace_back("cpu", cpu);
  if (!memory.empty()) resources.requests.emplace_back("memory", memory);
  if (!memory.empty()) resources.limits.emplace_back("memory", memory);
  if (gpus > 0) resources.limits.emplace_back("nvidia.com/gpu", absl::StrCat(gpus));
  return resources;
}

std::optional<ResourceRequirements> RoleResources(const JobSpec& spec, PodRole role) {
  const K8sSection& k8s = spec.k8s;
  switch (role) {
    case PodRole::kCoordinator:
      return Resources(k8s.coordinator_cpu, k8s.coordinator_memory);
    case PodRole::kServer:
    case PodRole::kSpare:
      return Resources(k8s.server_cpu, k8s.server_memory);
    case PodRole::kWorker:
      return Resources(
          k8s.worker_cpu, k8s.worker_memory,
          spec.cluster.worker_device == WorkerDevice::kCuda ? spec.cluster.gpus_per_worker : 0);
  }
  return std::nullopt;
}

// How a probe asks grpc.health.v1.Health on the role's port about `service`: Kubernetes'
// gRPC probe; with security.tls, `ecps health` run in the container (an exec probe), which
// presents the pod's own certificate: the kubelet's gRPC probe presents none, and a TLS role
// completes no handshake without one. The health service wants no token (docs/security.md).
std::variant<GrpcAction, ExecAction> ProbeAction(const JobSpec& spec, PodRole role,
                                                 const std::string& service) {
  const int port = RolePort(spec, role);
  if (!spec.security.tls.enabled()) return GrpcAction{.port = port, .service = service};
  std::vector<std::string> command = {"ecps", "health", JoinHostPort("127.0.0.1", port),
                                      RoleName(CredentialRole(role))};
  if (!service.empty()) command.insert(command.end(), {"--service", service});
  command.insert(command.end(), {"--deadline-ms", absl::StrCat(kExecProbeDeadlineMs)});
  command.insert(command.end(),
                 {"--tls-ca", kK8sTlsCa, "--tls-cert", kK8sTlsCert, "--tls-key", kK8sTlsKey});
  return ExecAction{.command = std::move(command)};
}

// Each role starts its gRPC server before its long work (a server listens before it builds
// or rebuilds its tables), so no startup probe is needed.
//
// Liveness asks for "" (the process serves at all). Its failure restarts the container, which
// for a server means a rebuild of its whole share, so it is lenient: a probe may wait 5 s
// for an answer (a server busy rebuilding, with cluster.server_threads RPC threads, answers
// late, not never) and only 6 misses in a row, a minute, count. Readiness asks for the
// role's own service and restarts nothing, so it is brisk: every 5 s, 3 misses.
Probe LivenessProbe(const JobSpec& spec, PodRole role) {
  return Probe{.action = ProbeAction(spec, role, ""),
               .initial_delay_seconds = 10,
               .period_seconds = 10,
               .timeout_seconds = 5,
               .failure_threshold = 6};
}

// What a role's readiness reports: the coordinator once it takes registrations, a server
// once it answers requests (a replacement: once rebuilt); a worker has no service of its
// own ("": the process serves).
std::string ReadinessService(PodRole role) {
  switch (role) {
    case PodRole::kCoordinator:
      return "ecps.v1.Coordinator";
    case PodRole::kServer:
    case PodRole::kSpare:
      return "ecps.v1.ParameterServer";
    case PodRole::kWorker:
      return "";
  }
  return "";
}

Probe ReadinessProbe(const JobSpec& spec, PodRole role) {
  return Probe{.action = ProbeAction(spec, role, ReadinessService(role)),
               .initial_delay_seconds = 2,
               .period_seconds = 5,
               .timeout_seconds = 5,
               .failure_threshold = 3};
}

// The server's start: pod <job>-server-N asks for server id N, its ordinal. A container
// that Kubernetes restarts in that pod is a new process (a new instance) asking for N again.
// The coordinator gives it N when N's last holder was declared dead and no spare took N: it
// then rebuilds N online. It refuses when N is held by a live process (the spare that took
// N over, or the previous container before it is declared dead); then the container serves
// on as a spare (--id -1), for the next failure, instead of crash-looping on N. sh is PID 1
// and ignores signals it has no trap for, so it passes SIGTERM on to ecps.
std::string ServerScript(const Names& n) {
  return absl::StrCat(
      "a=\"--spec ", kK8sSpecPath, " --host 0.0.0.0 --port ", kK8sServerPort,
      " --advertise $POD_NAME.", n.server_domain, "\"\n", "stop=\n",
      "trap 'stop=1; kill -TERM \"$pid\" 2>/dev/null' TERM INT\n",
      "ecps server $a --id \"${POD_NAME##*-}\" &\n", "pid=$!\n",
      "# A trapped signal ends wait early: wait again until ecps has exited.\n",
      "while wait \"$pid\"; rc=$?; kill -0 \"$pid\" 2>/dev/null; do :; done\n",
      "if [ -n \"$stop\" ] || [ \"$rc\" -eq 0 ]; then exit \"$rc\"; fi\n", "trap - TERM INT\n",
      "echo \"ecps k8s: server ${POD_NAME##*-} exited with $rc; serving on as a spare\" >&2\n",
      "exec ecps server $a --id -1\n");
}

// The container's command and arguments: `ecps ROLE` with its flags; a server's is a script.
void SetCommand(const JobSpec& spec, const Names& n, PodRole role, Container& c) {
  const std::string port = absl::StrCat(RolePort(spec, role));
  c.command = {"ecps"};
  switch (role) {
    case PodRole::kCoordinator:
      // --state-dir on the pod's claim: a coordinator that Kubernetes starts again takes the
      // job over. --linger-ms -1: after the job ended it serves the final status until the
      // objects are deleted, since one that exits would only be started again.
      c.args = {"coordinator", "--spec",      kK8sSpecPath,
                "--host",      "0.0.0.0",     "--port",
                port,          "--advertise", absl::StrCat(n.coordinator, ".", n.ns, ".svc"),
                "--state-dir", kK8sStateDir,  "--linger-ms",
                "-1"};
      break;
    case PodRole::kServer:
      c.command = {"sh", "-c", ServerScript(n)};
      break;
    case PodRole::kSpare:
      // $(POD_NAME): Kubernetes puts the variable of env in.
      c.args = {"server",
                "--spec",
                kK8sSpecPath,
                "--id",
                "-1",
                "--host",
                "0.0.0.0",
                "--port",
                port,
                "--advertise",
                absl::StrCat("$(POD_NAME).", n.server_domain)};
      break;
    case PodRole::kWorker:
      c.args = {"worker", "--spec", kK8sSpecPath, "--id", "$(ECPS_WORKER_ID)", "--port", port};
      break;
  }
}

std::vector<EnvVar> RoleEnv(const Names& n, PodRole role) {
  std::vector<EnvVar> env = {SecretEnv(n, role)};
  if (role != PodRole::kCoordinator) {
    env.push_back(EnvVar{.name = "ECPS_COORDINATOR", .value = n.coordinator_address});
  }
  if (role == PodRole::kServer || role == PodRole::kSpare) {
    env.push_back(FieldEnv("POD_NAME", "metadata.name"));
  }
  if (role == PodRole::kWorker) {
    // The Job controller writes each pod's completion index into this annotation.
    env.push_back(FieldEnv("ECPS_WORKER_ID",
                           "metadata.annotations['batch.kubernetes.io/job-completion-index']"));
  }
  return env;
}

std::vector<ContainerPort> RolePorts(const JobSpec& spec, PodRole role) {
  std::vector<ContainerPort> ports = {{.name = "grpc", .container_port = RolePort(spec, role)}};
  if (MetricsPort(spec) > 0) {
    ports.push_back({.name = "metrics", .container_port = MetricsPort(spec)});
  }
  return ports;
}

std::vector<VolumeMount> RoleMounts(const JobSpec& spec, PodRole role) {
  std::vector<VolumeMount> mounts = {
      {.name = "spec", .mount_path = "/etc/ecps", .read_only = true}};
  if (role != PodRole::kWorker) {
    mounts.push_back(
        {.name = "checkpoints", .mount_path = PodPath(spec.fault_tolerance.checkpoint.dir)});
  }
  if (role == PodRole::kCoordinator) {
    mounts.push_back({.name = kStateVolume, .mount_path = kK8sStateMount});
  }
  if (spec.security.tls.enabled()) {
    mounts.push_back({.name = "tls", .mount_path = kK8sTlsDir, .read_only = true});
  }
  return mounts;
}

Container RoleContainer(const JobSpec& spec, const Names& n, PodRole role) {
  Container c{.name = PodRoleName(role),
              .image = spec.k8s.image,
              .image_pull_policy = spec.k8s.image_pull_policy,
              .working_dir = kK8sWorkDir,
              .env = RoleEnv(n, role),
              .ports = RolePorts(spec, role),
              .resources = RoleResources(spec, role),
              .liveness_probe = LivenessProbe(spec, role),
              .readiness_probe = ReadinessProbe(spec, role),
              .volume_mounts = RoleMounts(spec, role)};
  SetCommand(spec, n, role, c);
  return c;
}

std::vector<Volume> RoleVolumes(const JobSpec& spec, const Names& n, PodRole role) {
  std::vector<Volume> volumes = {
      {.name = "spec",
       .source = ConfigMapVolumeSource{.name = n.spec_map,
                                       .items = {{.key = "spec.yaml", .path = "spec.yaml"}}}}};
  const std::string& claim = spec.k8s.checkpoint_claim;
  if (role != PodRole::kWorker) {
    Volume checkpoints{.name = "checkpoints", .source = EmptyDirVolumeSource{}};
    if (!claim.empty()) checkpoints.source = PersistentVolumeClaimVolumeSource{claim};
    volumes.push_back(std::move(checkpoints));
  }
  if (spec.security.tls.enabled()) {
    // This role's Secret only: a worker's pod never holds a server's key.
    volumes.push_back(
        {.name = "tls",
         .source = SecretVolumeSource{.secret_name = n.TlsSecret(CredentialRole(role)),
                                      .default_mode = kTlsFileMode}});
  }
  return volumes;
}

StringMap NodeSelector(const std::vector<std::string>& labels) {
  StringMap selector;
  for (const std::string& label : labels) {
    const size_t eq = label.find('=');
    selector.emplace_back(label.substr(0, eq), label.substr(eq + 1));
  }
  return selector;
}

}  // namespace

StringMap Labels(const Names& n, PodRole role) {
  StringMap labels = {{"app.kubernetes.io/name", "ecps"},
                      {"app.kubernetes.io/instance", n.job},
                      {"app.kubernetes.io/component", PodRoleName(role)},
                      {"app.kubernetes.io/managed-by", "ecps-k8s"}};
  if (role == PodRole::kServer || role == PodRole::kSpare) {
    labels.emplace_back("ecps/parameter-server", "true");
  }
  return labels;
}

StringMap SelectorLabels(const Names& n, PodRole role) {
  return {{"app.kubernetes.io/instance", n.job},
          {"app.kubernetes.io/component", PodRoleName(role)}};
}

StringMap ParameterServerLabels(const Names& n) {
  return {{"app.kubernetes.io/instance", n.job}, {"ecps/parameter-server", "true"}};
}

StringMap JobLabels(const Names& n) {
  return {{"app.kubernetes.io/name", "ecps"},
          {"app.kubernetes.io/instance", n.job},
          {"app.kubernetes.io/managed-by", "ecps-k8s"}};
}

PodTemplateSpec PodTemplate(const JobSpec& spec, const Names& n, PodRole role,
                            const std::string& restart_policy) {
  const K8sSection& k8s = spec.k8s;
  PodTemplateSpec pod{.metadata = {.labels = Labels(n, role)}};
  if (MetricsPort(spec) > 0) {
    pod.metadata.annotations = {{"prometheus.io/scrape", "true"},
                                {"prometheus.io/port", absl::StrCat(MetricsPort(spec))},
                                {"prometheus.io/path", "/metrics"}};
  }
  pod.spec = PodSpec{.restart_policy = restart_policy,
                     // A job named "ecps" would otherwise find ECPS_COORDINATOR_PORT and the
                     // like (Docker links of every Service) beside ECPS_COORDINATOR.
                     .enable_service_links = false,
                     // ecps never talks to the API server: no credential for it in the pods.
                     .automount_service_account_token = false,
                     .service_account_name = k8s.service_account,
                     .node_selector = NodeSelector(k8s.node_selector),
                     .containers = {RoleContainer(spec, n, role)},
                     .volumes = RoleVolumes(spec, n, role)};
  // The coordinator's state claim is always a volume of its own.
  if ((!k8s.checkpoint_claim.empty() && role != PodRole::kWorker) || spec.security.tls.enabled() ||
      role == PodRole::kCoordinator) {
    // OnRootMismatch: the files of a large claim are not walked at every start.
    pod.spec.security_context =
        PodSecurityContext{.fs_group = kImageGid, .fs_group_change_policy = "OnRootMismatch"};
  }
  return pod;
}

}  // namespace ecps::k8s
