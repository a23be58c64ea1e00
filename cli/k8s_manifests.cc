#include "cli/k8s_manifests.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <random>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "cli/role_security.h"
#include "runtime/net.h"
#include "runtime/security.h"
#include "yaml-cpp/yaml.h"

namespace ecps {
namespace {

namespace fs = std::filesystem;

// deploy/Containerfile's `ecps` group: a claim's files are made writable to it (fsGroup), so
// that the image's unprivileged user can write checkpoints, and a TLS Secret's files readable.
constexpr int kImageGid = 10001;
// A TLS Secret's files: 0440, readable by their owner and the fsGroup only (the key is the
// role's credential).
constexpr int kTlsFileMode = 0440;
// `ecps health`'s deadline in a TLS job's exec probes: within the probes' timeoutSeconds (5),
// so that a late answer is reported by ecps, not cut off by the kubelet.
constexpr int kExecProbeDeadlineMs = 4000;
// Kubernetes' names built from the job's must stay DNS labels: <job>-server-<ordinal> and the
// StatefulSet's controller-revision-hash label (<job>-server-<10 characters>) are the
// longest, within 63 characters up to 45 for the job.
constexpr size_t kMaxJobName = 45;
// The coordinator's state claim (its volumeClaimTemplate "state"): the log holds a few
// snapshots of some KiB; 1Gi is the least many provisioners hand out.
constexpr const char* kStateVolume = "state";
constexpr const char* kStateClaimSize = "1Gi";

// The files, in the order they are applied (kubectl reads a folder in name order); the
// command removes those of an earlier run that this spec does not write.
constexpr const char* kConfigMapFile = "00-spec.configmap.yaml";
constexpr const char* kSecretFile = "01-token.secret.yaml";
constexpr const char* kCoordinatorTlsFile = "02-coordinator-tls.secret.yaml";
constexpr const char* kServerTlsFile = "03-server-tls.secret.yaml";
constexpr const char* kWorkerTlsFile = "04-worker-tls.secret.yaml";
constexpr const char* kCoordinatorServiceFile = "10-coordinator.service.yaml";
constexpr const char* kCoordinatorSetFile = "11-coordinator.statefulset.yaml";
// What the coordinator was before it kept its state: a Job. Never written; removed from a
// folder an earlier version wrote, so that `kubectl apply -f DIR` does not start both.
constexpr const char* kCoordinatorJobFile = "11-coordinator.job.yaml";
constexpr const char* kServerServiceFile = "20-server.service.yaml";
constexpr const char* kServerSetFile = "21-server.statefulset.yaml";
constexpr const char* kSpareSetFile = "22-spare.statefulset.yaml";
constexpr const char* kWorkerJobFile = "30-worker.job.yaml";
constexpr const char* kAllFiles[] = {
    kConfigMapFile,      kSecretFile,         kCoordinatorTlsFile,
    kServerTlsFile,      kWorkerTlsFile,      kCoordinatorServiceFile,
    kCoordinatorSetFile, kCoordinatorJobFile, kServerServiceFile,
    kServerSetFile,      kSpareSetFile,       kWorkerJobFile};

// A YAML value that keeps its type, so that a string that would read as a number or a
// boolean ("9400", "2", "true") is written quoted: Kubernetes wants strings there
// (annotations, label values, quantities are safest as strings).
class Yaml {
 public:
  using Fields = std::vector<std::pair<std::string, Yaml>>;
  // Implicit, so that the objects below read like the YAML they make.
  Yaml(const char* s) : kind_(kString), text_(s) {}             // NOLINT(runtime/explicit)
  Yaml(std::string s) : kind_(kString), text_(std::move(s)) {}  // NOLINT(runtime/explicit)
  Yaml(int v) : kind_(kInt), int_(v) {}                         // NOLINT(runtime/explicit)
  Yaml(bool v) : kind_(kBool), bool_(v) {}                      // NOLINT(runtime/explicit)

  static Yaml Map(Fields fields) {
    Yaml y(kMap);
    y.fields_ = std::move(fields);
    return y;
  }
  static Yaml List(std::vector<Yaml> items) {
    Yaml y(kList);
    y.items_ = std::move(items);
    return y;
  }
  // Appends a key to a map, or an item to a list.
  void Set(std::string key, Yaml value) { fields_.emplace_back(std::move(key), std::move(value)); }
  void Add(Yaml item) { items_.push_back(std::move(item)); }

  void Emit(YAML::Emitter& out) const {
    switch (kind_) {
      case kString:
        if (text_.find('\n') != std::string::npos) {
          out << YAML::Literal << text_;
        } else if (ReadsAsAnotherType(text_)) {
          out << YAML::DoubleQuoted << text_;
        } else {
          out << text_;  // the emitter quotes what a plain scalar cannot hold
        }
        break;
      case kInt:
        out << int_;
        break;
      case kBool:
        out << YAML::TrueFalseBool << bool_;
        break;
      case kMap:
        out << YAML::BeginMap;
        for (const auto& [key, value] : fields_) {
          out << YAML::Key << key << YAML::Value;
          value.Emit(out);
        }
        out << YAML::EndMap;
        break;
      case kList:
        out << YAML::BeginSeq;
        for (const Yaml& item : items_) item.Emit(out);
        out << YAML::EndSeq;
        break;
    }
  }

 private:
  enum Kind { kString, kInt, kBool, kMap, kList };
  explicit Yaml(Kind kind) : kind_(kind) {}

  // Whether a YAML 1.1 reader (kubectl's) could take the plain scalar for something other
  // than a string: anything starting like a number, and the boolean and null words.
  static bool ReadsAsAnotherType(const std::string& s) {
    if (s.empty() || absl::ascii_isdigit(static_cast<unsigned char>(s[0])) ||
        s[0] == '+' || s[0] == '-' || s[0] == '.') {
      return true;
    }
    const std::string lower = absl::AsciiStrToLower(s);
    for (const char* word : {"true", "false", "yes", "no", "on", "off", "y", "n", "null", "~"}) {
      if (lower == word) return true;
    }
    return false;
  }

  Kind kind_;
  std::string text_;
  int int_ = 0;
  bool bool_ = false;
  Fields fields_;
  std::vector<Yaml> items_;
};

using Fields = Yaml::Fields;
Yaml Map(Fields fields) { return Yaml::Map(std::move(fields)); }
Yaml List(std::vector<Yaml> items) { return Yaml::List(std::move(items)); }

enum class PodRole { kCoordinator, kServer, kSpare, kWorker };

const char* RoleName(PodRole role) {
  switch (role) {
    case PodRole::kCoordinator:
      return "coordinator";
    case PodRole::kServer:
      return "server";
    case PodRole::kSpare:
      return "spare";
    case PodRole::kWorker:
      return "worker";
  }
  return "";
}

// The credentials a role's pods hold: a spare's are a server's (it becomes one).
Role CredentialRole(PodRole role) {
  switch (role) {
    case PodRole::kCoordinator:
      return Role::kCoordinator;
    case PodRole::kServer:
    case PodRole::kSpare:
      return Role::kServer;
    case PodRole::kWorker:
      return Role::kWorker;
  }
  return Role::kWorker;
}

// The roles that run in pods, in the order of their TLS Secrets (LoadK8sTls); the admin's
// certificate stays with the operators.
constexpr Role kPodRoles[] = {Role::kCoordinator, Role::kServer, Role::kWorker};

const char* TlsSecretFile(Role role) {
  return role == Role::kCoordinator ? kCoordinatorTlsFile
         : role == Role::kServer    ? kServerTlsFile
                                    : kWorkerTlsFile;
}

// A DNS-1035 label (what a Service name must be): a lower-case letter first, then lower-case
// letters, digits and -, not ending with -.
bool IsServiceLabel(const std::string& s) {
  if (s.empty() || !absl::ascii_islower(static_cast<unsigned char>(s[0])) || s.back() == '-') {
    return false;
  }
  return std::all_of(s.begin(), s.end(), [](char c) {
    return absl::ascii_islower(static_cast<unsigned char>(c)) ||
           absl::ascii_isdigit(static_cast<unsigned char>(c)) || c == '-';
  });
}

int CoordinatorPort(const JobSpec& spec) {
  return spec.cluster.coordinator_port != 0 ? spec.cluster.coordinator_port
                                            : kK8sCoordinatorPort;
}

// -1: no metrics.
int MetricsPort(const JobSpec& spec) {
  return spec.monitoring.metrics_port == 0 ? kK8sMetricsPort : spec.monitoring.metrics_port;
}

int RolePort(const JobSpec& spec, PodRole role) {
  switch (role) {
    case PodRole::kCoordinator:
      return CoordinatorPort(spec);
    case PodRole::kServer:
    case PodRole::kSpare:
      return kK8sServerPort;
    case PodRole::kWorker:
      return kK8sWorkerPort;
  }
  return 0;
}

// Relative paths in the spec mean the same in a pod as under `ecps run` started from the
// image's working directory.
std::string PodPath(const std::string& path) {
  fs::path p(path);
  if (p.is_relative()) p = fs::path(kK8sWorkDir) / p;
  return p.lexically_normal().string();
}

// The names every object uses.
struct Names {
  explicit Names(const JobSpec& spec)
      : job(spec.job.name),
        ns(spec.k8s.namespace_name),
        spec_map(job + "-spec"),
        token_secret(job + "-token"),
        coordinator(job + "-coordinator"),
        server(job + "-server"),
        spare(job + "-spare"),
        worker(job + "-worker"),
        // Servers and spares share the headless Service of the servers: every parameter
        // server, standing or spare, is <pod>.<job>-server.<namespace>.svc.
        server_domain(absl::StrCat(server, ".", ns, ".svc")),
        coordinator_address(JoinHostPort(absl::StrCat(coordinator, ".", ns, ".svc"),
                                         CoordinatorPort(spec))) {}
  // With security.tls, the Secret of `role`'s certificate: <job>-<role>-tls.
  std::string TlsSecret(Role role) const { return absl::StrCat(job, "-", RoleName(role), "-tls"); }

  std::string job, ns, spec_map, token_secret, coordinator, server, spare, worker;
  std::string server_domain, coordinator_address;
};

Yaml Metadata(const Names& n, const std::string& name, Yaml labels) {
  return Map({{"name", name}, {"namespace", n.ns}, {"labels", std::move(labels)}});
}

// What selects a role's pods; the pods carry these and more (Labels).
Yaml SelectorLabels(const Names& n, PodRole role) {
  return Map({{"app.kubernetes.io/instance", n.job},
              {"app.kubernetes.io/component", RoleName(role)}});
}

Yaml Labels(const Names& n, PodRole role) {
  Yaml labels = Map({{"app.kubernetes.io/name", "ecps"},
                     {"app.kubernetes.io/instance", n.job},
                     {"app.kubernetes.io/component", RoleName(role)},
                     {"app.kubernetes.io/managed-by", "ecps-k8s"}});
  // The headless Service selects servers and spares alike: a spare becomes a server.
  if (role == PodRole::kServer || role == PodRole::kSpare) labels.Set("ecps/parameter-server", "true");
  return labels;
}

Yaml JobLabels(const Names& n) {
  return Map({{"app.kubernetes.io/name", "ecps"},
              {"app.kubernetes.io/instance", n.job},
              {"app.kubernetes.io/managed-by", "ecps-k8s"}});
}

// ECPS_TOKEN from the Secret: the job secret for the coordinator and the servers, which check
// every role's token; a worker's role token for the workers (docs/security.md).
Yaml SecretEnv(const Names& n, PodRole role) {
  const char* key = role == PodRole::kWorker ? "worker-token" : "token";
  return Map({{"name", "ECPS_TOKEN"},
              {"valueFrom",
               Map({{"secretKeyRef", Map({{"name", n.token_secret}, {"key", key}})}})}});
}

Yaml FieldEnv(const std::string& name, const std::string& field) {
  return Map({{"name", name}, {"valueFrom", Map({{"fieldRef", Map({{"fieldPath", field}})}})}});
}

// Requests and limits: CPU as a request only (a CPU limit throttles a server's RPC threads in
// bursts, which shows as latency on every worker's step), memory as request and limit (what a
// server holds is its share of the model: it must fit, and a node must not be overcommitted
// with it). GPUs (a GPU worker's) as a limit: Kubernetes takes a device plugin's resource as
// a limit only, the request following it.
std::optional<Yaml> Resources(const std::string& cpu, const std::string& memory, int gpus = 0) {
  if (cpu.empty() && memory.empty() && gpus == 0) return std::nullopt;
  Yaml requests = Map({});
  if (!cpu.empty()) requests.Set("cpu", cpu);
  if (!memory.empty()) requests.Set("memory", memory);
  Yaml resources = Map({{"requests", std::move(requests)}});
  Yaml limits = Map({});
  if (!memory.empty()) limits.Set("memory", memory);
  if (gpus > 0) limits.Set("nvidia.com/gpu", absl::StrCat(gpus));
  if (!memory.empty() || gpus > 0) resources.Set("limits", std::move(limits));
  return resources;
}

// How a probe asks grpc.health.v1.Health on the role's port about `service`: Kubernetes'
// gRPC probe; with security.tls, `ecps health` run in the container (an exec probe), which
// presents the pod's own certificate: the kubelet's gRPC probe presents none, and a TLS role
// completes no handshake without one. The health service wants no token (docs/security.md).
std::pair<std::string, Yaml> ProbeAction(const JobSpec& spec, PodRole role,
                                         const std::string& service) {
  const int port = RolePort(spec, role);
  if (!spec.security.tls.enabled()) {
    return {"grpc", Map({{"port", port}, {"service", service}})};
  }
  Yaml command =
      List({"ecps", "health", JoinHostPort("127.0.0.1", port), RoleName(CredentialRole(role))});
  if (!service.empty()) {
    command.Add("--service");
    command.Add(service);
  }
  command.Add("--deadline-ms");
  command.Add(absl::StrCat(kExecProbeDeadlineMs));
  for (const auto& [flag, path] :
       {std::pair{"--tls-ca", kK8sTlsCa}, std::pair{"--tls-cert", kK8sTlsCert},
        std::pair{"--tls-key", kK8sTlsKey}}) {
    command.Add(flag);
    command.Add(path);
  }
  return {"exec", Map({{"command", std::move(command)}})};
}

// Each role starts its gRPC server before its long work (a server listens before it builds
// or rebuilds its tables), so no startup probe is needed.
//
// Liveness asks for "" (the process serves at all). Its failure restarts the container, which
// for a server means a rebuild of its whole share, so it is lenient: a probe may wait 5 s
// for an answer (a server busy rebuilding, with cluster.server_threads RPC threads, answers
// late, not never) and only 6 misses in a row, a minute, count. Readiness asks for the
// role's own service and restarts nothing, so it is brisk: every 5 s, 3 misses.
Yaml LivenessProbe(const JobSpec& spec, PodRole role) {
  return Map({ProbeAction(spec, role, ""),
              {"initialDelaySeconds", 10},
              {"periodSeconds", 10},
              {"timeoutSeconds", 5},
              {"failureThreshold", 6}});
}

Yaml ReadinessProbe(const JobSpec& spec, PodRole role, const std::string& service) {
  return Map({ProbeAction(spec, role, service),
              {"initialDelaySeconds", 2},
              {"periodSeconds", 5},
              {"timeoutSeconds", 5},
              {"failureThreshold", 3}});
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
      " --advertise $POD_NAME.", n.server_domain, "\"\n",
      "stop=\n",
      "trap 'stop=1; kill -TERM \"$pid\" 2>/dev/null' TERM INT\n",
      "ecps server $a --id \"${POD_NAME##*-}\" &\n",
      "pid=$!\n",
      "# A trapped signal ends wait early: wait again until ecps has exited.\n",
      "while wait \"$pid\"; rc=$?; kill -0 \"$pid\" 2>/dev/null; do :; done\n",
      "if [ -n \"$stop\" ] || [ \"$rc\" -eq 0 ]; then exit \"$rc\"; fi\n",
      "trap - TERM INT\n",
      "echo \"ecps k8s: server ${POD_NAME##*-} exited with $rc; serving on as a spare\" >&2\n",
      "exec ecps server $a --id -1\n");
}

Yaml Container(const JobSpec& spec, const Names& n, PodRole role) {
  const K8sSection& k8s = spec.k8s;
  const int port = RolePort(spec, role);
  const std::string spec_flag = kK8sSpecPath;
  Yaml env = List({SecretEnv(n, role)});
  Yaml command = List({"ecps"});
  Yaml args = List({});
  switch (role) {
    case PodRole::kCoordinator:
      // --state-dir on the pod's claim: a coordinator that Kubernetes starts again takes the
      // job over. --linger-ms -1: after the job ended it serves the final status until the
      // objects are deleted, since one that exits would only be started again.
      args =
          List({"coordinator", "--spec", spec_flag, "--host", "0.0.0.0", "--port",
                absl::StrCat(port), "--advertise", absl::StrCat(n.coordinator, ".", n.ns, ".svc"),
                "--state-dir", kK8sStateDir, "--linger-ms", "-1"});
      break;
    case PodRole::kServer:
      command = List({"sh", "-c", ServerScript(n)});
      break;
    case PodRole::kSpare:
      // $(POD_NAME): Kubernetes puts the variable of env in.
      args = List({"server", "--spec", spec_flag, "--id", "-1", "--host", "0.0.0.0", "--port",
                   absl::StrCat(port), "--advertise",
                   absl::StrCat("$(POD_NAME).", n.server_domain)});
      break;
    case PodRole::kWorker:
      args = List({"worker", "--spec", spec_flag, "--id", "$(ECPS_WORKER_ID)", "--port",
                   absl::StrCat(port)});
      break;
  }
  if (role != PodRole::kCoordinator) {
    env.Add(Map({{"name", "ECPS_COORDINATOR"}, {"value", n.coordinator_address}}));
  }
  if (role == PodRole::kServer || role == PodRole::kSpare) env.Add(FieldEnv("POD_NAME", "metadata.name"));
  if (role == PodRole::kWorker) {
    // The Job controller writes each pod's completion index into this annotation.
    env.Add(FieldEnv("ECPS_WORKER_ID",
                     "metadata.annotations['batch.kubernetes.io/job-completion-index']"));
  }
  Yaml ports = List({Map({{"name", "grpc"}, {"containerPort", port}, {"protocol", "TCP"}})});
  if (MetricsPort(spec) > 0) {
    ports.Add(Map({{"name", "metrics"}, {"containerPort", MetricsPort(spec)}, {"protocol", "TCP"}}));
  }
  Yaml mounts = List({Map({{"name", "spec"}, {"mountPath", "/etc/ecps"}, {"readOnly", true}})});
  if (role != PodRole::kWorker) {
    mounts.Add(Map({{"name", "checkpoints"},
                    {"mountPath", PodPath(spec.fault_tolerance.checkpoint.dir)}}));
  }
  if (role == PodRole::kCoordinator) {
    mounts.Add(Map({{"name", kStateVolume}, {"mountPath", kK8sStateMount}}));
  }
  if (spec.security.tls.enabled()) {
    mounts.Add(Map({{"name", "tls"}, {"mountPath", kK8sTlsDir}, {"readOnly", true}}));
  }
  Yaml container = Map({{"name", RoleName(role)},
                        {"image", k8s.image},
                        {"imagePullPolicy", k8s.image_pull_policy},
                        {"workingDir", kK8sWorkDir},
                        {"command", std::move(command)}});
  if (role != PodRole::kServer) container.Set("args", std::move(args));
  container.Set("env", std::move(env));
  container.Set("ports", std::move(ports));
  std::optional<Yaml> resources;
  switch (role) {
    case PodRole::kCoordinator:
      resources = Resources(k8s.coordinator_cpu, k8s.coordinator_memory);
      break;
    case PodRole::kServer:
    case PodRole::kSpare:
      resources = Resources(k8s.server_cpu, k8s.server_memory);
      break;
    case PodRole::kWorker:
      resources = Resources(k8s.worker_cpu, k8s.worker_memory,
                            spec.cluster.worker_device == WorkerDevice::kCuda
                                ? spec.cluster.gpus_per_worker
                                : 0);
      break;
  }
  if (resources) container.Set("resources", std::move(*resources));
  container.Set("livenessProbe", LivenessProbe(spec, role));
  container.Set("readinessProbe", ReadinessProbe(spec, role, ReadinessService(role)));
  container.Set("volumeMounts", std::move(mounts));
  return container;
}

Yaml PodTemplate(const JobSpec& spec, const Names& n, PodRole role, const char* restart_policy) {
  const K8sSection& k8s = spec.k8s;
  Yaml metadata = Map({{"labels", Labels(n, role)}});
  if (MetricsPort(spec) > 0) {
    metadata.Set("annotations", Map({{"prometheus.io/scrape", "true"},
                                     {"prometheus.io/port", absl::StrCat(MetricsPort(spec))},
                                     {"prometheus.io/path", "/metrics"}}));
  }
  Yaml pod = Map({{"restartPolicy", restart_policy},
                  // A job named "ecps" would otherwise find ECPS_COORDINATOR_PORT and the like
                  // (Docker links of every Service) beside ECPS_COORDINATOR.
                  {"enableServiceLinks", false},
                  // ecps never talks to the API server: no credential for it in the pods.
                  {"automountServiceAccountToken", false}});
  if (!k8s.service_account.empty()) pod.Set("serviceAccountName", k8s.service_account);
  if (!k8s.node_selector.empty()) {
    Yaml selector = Map({});
    for (const std::string& label : k8s.node_selector) {
      const size_t eq = label.find('=');
      selector.Set(label.substr(0, eq), label.substr(eq + 1));
    }
    pod.Set("nodeSelector", std::move(selector));
  }
  const bool tls = spec.security.tls.enabled();
  // The coordinator's state claim is always a volume of its own.
  if ((!k8s.checkpoint_claim.empty() && role != PodRole::kWorker) || tls ||
      role == PodRole::kCoordinator) {
    // OnRootMismatch: the files of a large claim are not walked at every start.
    pod.Set("securityContext",
            Map({{"fsGroup", kImageGid}, {"fsGroupChangePolicy", "OnRootMismatch"}}));
  }
  pod.Set("containers", List({Container(spec, n, role)}));
  Yaml volumes = List({Map({{"name", "spec"},
                            {"configMap", Map({{"name", n.spec_map},
                                               {"items", List({Map({{"key", "spec.yaml"},
                                                                    {"path", "spec.yaml"}})})}})}})});
  if (role != PodRole::kWorker) {
    volumes.Add(k8s.checkpoint_claim.empty()
                    ? Map({{"name", "checkpoints"}, {"emptyDir", Map({})}})
                    : Map({{"name", "checkpoints"},
                           {"persistentVolumeClaim", Map({{"claimName", k8s.checkpoint_claim}})}}));
  }
  if (tls) {
    // This role's Secret only: a worker's pod never holds a server's key.
    volumes.Add(Map({{"name", "tls"},
                     {"secret", Map({{"secretName", n.TlsSecret(CredentialRole(role))},
                                     {"defaultMode", kTlsFileMode}})}}));
  }
  pod.Set("volumes", std::move(volumes));
  return Map({{"metadata", std::move(metadata)}, {"spec", std::move(pod)}});
}

Yaml ConfigMap(const JobSpec& spec, const Names& n) {
  return Map({{"apiVersion", "v1"},
              {"kind", "ConfigMap"},
              {"metadata", Metadata(n, n.spec_map, JobLabels(n))},
              {"data", Map({{"spec.yaml", SpecToYaml(K8sPodSpec(spec))}})}});
}

// `token`: the job secret (the coordinator's and the servers'); `worker-token`: the workers'
// role token; `admin-token`: the operators' (ecps status|scrub|kill|checkpoint). Each pod
// mounts only its own key (SecretEnv).
Yaml Secret(const Names& n, const std::string& token) {
  return Map({{"apiVersion", "v1"},
              {"kind", "Secret"},
              {"metadata", Metadata(n, n.token_secret, JobLabels(n))},
              {"type", "Opaque"},
              {"stringData", Map({{"token", token},
                                  {"worker-token", RoleToken(token, Role::kWorker)},
                                  {"admin-token", RoleToken(token, Role::kAdmin)}})}});
}

// With security.tls, one role's certificate, key and the CA, under the names of a
// kubernetes.io/tls Secret (which cert-manager, say, can issue instead): the pods of that
// role mount it at kK8sTlsDir.
Yaml TlsSecret(const Names& n, const TlsIdentity& identity) {
  return Map({{"apiVersion", "v1"},
              {"kind", "Secret"},
              {"metadata", Metadata(n, n.TlsSecret(identity.role), JobLabels(n))},
              {"type", "kubernetes.io/tls"},
              {"stringData", Map({{"tls.crt", identity.cert_pem},
                                  {"tls.key", identity.key_pem},
                                  {"ca.crt", identity.ca_pem}})}});
}

Yaml Service(const Names& n, const std::string& name, PodRole role, int port, bool headless) {
  Yaml selector = headless ? Map({{"app.kubernetes.io/instance", n.job},
                                  {"ecps/parameter-server", "true"}})
                           : SelectorLabels(n, role);
  Yaml spec = Map({});
  if (headless) spec.Set("clusterIP", "None");
  // The roles find each other through these names from their first second, before any is
  // ready (a server is ready only once the whole cluster has met), and must keep reaching
  // one that reports not ready: readiness is for people and `kubectl wait`, not routing.
  spec.Set("publishNotReadyAddresses", true);
  spec.Set("selector", std::move(selector));
  spec.Set("ports", List({Map({{"name", "grpc"},
                               {"port", port},
                               {"targetPort", "grpc"},
                               {"protocol", "TCP"}})}));
  return Map({{"apiVersion", "v1"},
              {"kind", "Service"},
              {"metadata", Metadata(n, name, Labels(n, role))},
              {"spec", std::move(spec)}});
}

// The coordinator: a StatefulSet of one pod, which Kubernetes starts again when it dies
// (restartPolicy Always, on this node or, once the pod is deleted, another), with a claim of
// its own from a volumeClaimTemplate for --state-dir: the claim outlives the pod, so the new
// coordinator takes the job over from the state log. A StatefulSet rather than a Deployment:
// it never runs two pods of one identity (a replacement waits until the old pod is gone, also
// from a node that stopped answering), which is what a single-writer log needs; a Deployment's
// ReplicaSet starts a new pod as soon as the old one is terminating. A coordinator started
// again after the job ended restores FINISHED or FAILED, which are final, and starts nothing;
// with --linger-ms -1 it then serves that status until deleted.
Yaml CoordinatorSet(const JobSpec& spec, const Names& n) {
  // No storageClassName: the cluster's default StorageClass.
  Yaml claim_spec = Map({{"accessModes", List({"ReadWriteOnce"})},
                         {"resources", Map({{"requests", Map({{"storage", kStateClaimSize}})}})}});
  Yaml claim = Map(
      {{"metadata", Map({{"name", kStateVolume}, {"labels", Labels(n, PodRole::kCoordinator)}})},
       {"spec", std::move(claim_spec)}});
  return Map(
      {{"apiVersion", "apps/v1"},
       {"kind", "StatefulSet"},
       {"metadata", Metadata(n, n.coordinator, Labels(n, PodRole::kCoordinator))},
       {"spec", Map({{"serviceName", n.coordinator},
                     {"replicas", 1},
                     // As for the servers: a changed template applies to a pod deleted by hand, not
                     // to the coordinator of a running job.
                     {"updateStrategy", Map({{"type", "OnDelete"}})},
                     {"selector", Map({{"matchLabels", SelectorLabels(n, PodRole::kCoordinator)}})},
                     {"template", PodTemplate(spec, n, PodRole::kCoordinator, "Always")},
                     {"volumeClaimTemplates", List({std::move(claim)})}})}});
}

Yaml ServerSet(const JobSpec& spec, const Names& n, PodRole role) {
  const bool spare = role == PodRole::kSpare;
  return Map(
      {{"apiVersion", "apps/v1"},
       {"kind", "StatefulSet"},
       {"metadata", Metadata(n, spare ? n.spare : n.server, Labels(n, role))},
       {"spec",
        Map({{"serviceName", n.server},
             {"replicas", spare ? spec.cluster.spares : spec.cluster.servers},
             // All at once: OrderedReady would start server-1 only when server-0 is ready, and
             // no server is ready before every server has registered.
             {"podManagementPolicy", "Parallel"},
             // A change of the template (a new image, other resources) must not restart the
             // servers of a running job one by one, each a failure to recover from: it applies
             // to pods deleted by hand, or to the next job.
             {"updateStrategy", Map({{"type", "OnDelete"}})},
             {"selector", Map({{"matchLabels", SelectorLabels(n, role)}})},
             {"template", PodTemplate(spec, n, role, "Always")}})}});
}

// Workers: completion index = worker id. A pod that fails (a crash, `ecps kill worker N`, a
// replacement refused while the coordinator still holds the dead worker's id) is replaced
// by a new pod with the same index, which resumes the dead worker's partition; each failure
// counts against backoffLimit, so it allows three per worker. A pod evicted or preempted
// (DisruptionTarget) does not count; a worker that exits 2 (a bad spec or flag) fails the Job
// at once, since its replacements would too.
Yaml WorkerJob(const JobSpec& spec, const Names& n) {
  const int workers = spec.cluster.workers;
  Yaml policy = Map(
      {{"rules",
        List({Map({{"action", "FailJob"},
                   {"onExitCodes",
                    Map({{"containerName", "worker"}, {"operator", "In"}, {"values", List({2})}})}}),
              Map({{"action", "Ignore"},
                   {"onPodConditions", List({Map({{"type", "DisruptionTarget"}, {"status", "True"}})})}})})}});
  return Map({{"apiVersion", "batch/v1"},
              {"kind", "Job"},
              {"metadata", Metadata(n, n.worker, Labels(n, PodRole::kWorker))},
              {"spec", Map({{"completionMode", "Indexed"},
                            {"completions", workers},
                            {"parallelism", workers},
                            {"backoffLimit", std::max(6, 3 * workers)},
                            {"podFailurePolicy", std::move(policy)},
                            {"template", PodTemplate(spec, n, PodRole::kWorker, "Never")}})}});
}

std::string Render(const Yaml& object, const std::string& header) {
  YAML::Emitter out;
  object.Emit(out);
  return absl::StrCat(header, out.c_str(), "\n");
}

bool IsValidToken(const std::string& token) {
  if (token.empty() || token.size() > 256) return false;
  return std::all_of(token.begin(), token.end(), [](char c) { return c > 0x20 && c < 0x7f; });
}

// The token of the Secret an earlier run wrote into `dir`; empty when there is none.
std::string EarlierToken(const std::string& dir) {
  const std::string path = (fs::path(dir) / kSecretFile).string();
  std::error_code ec;
  if (!fs::exists(path, ec)) return "";
  try {
    const YAML::Node secret = YAML::LoadFile(path);
    const YAML::Node token = secret["stringData"]["token"];
    if (token && token.IsScalar() && IsValidToken(token.Scalar())) return token.Scalar();
  } catch (const YAML::Exception&) {
    // Not ours, or broken: a new token.
  }
  return "";
}

// Writes `text` to `path` with `mode`, also when the file was there with another.
absl::Status WriteFile(const std::string& path, const std::string& text, mode_t mode) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return absl::InternalError(absl::StrCat(path, ": ", std::strerror(errno)));
  bool ok = ::fchmod(fd, mode) == 0;
  size_t done = 0;
  while (ok && done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += static_cast<size_t>(n);
  }
  const int err = errno;
  ok = ::close(fd) == 0 && ok;
  if (!ok) return absl::InternalError(absl::StrCat(path, ": ", std::strerror(err)));
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckK8sSpec(const JobSpec& spec) {
  const auto refuse = [](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat(parts...));
  };
  const K8sSection& k8s = spec.k8s;
  if (k8s.image.empty()) {
    return refuse("k8s.image: empty; ecps k8s needs the container image that holds ecps on its "
                  "PATH (deploy/Containerfile builds one), e.g. k8s: {image: "
                  "registry.example.org/ecps:1.0}");
  }
  if (spec.job.name.size() > kMaxJobName || !IsServiceLabel(spec.job.name)) {
    return refuse("job.name: ecps k8s names Kubernetes objects and DNS names after the job (",
                  spec.job.name, "-coordinator, ", spec.job.name,
                  "-server-0, ...), so it must be at most ", kMaxJobName,
                  " lower-case letters, digits and -, starting with a letter and not ending "
                  "with -; got \"", spec.job.name, "\"");
  }
  if (!spec.cluster.host.empty() && !IsWildcardHost(spec.cluster.host)) {
    return refuse("cluster.host: ", spec.cluster.host,
                  " cannot be bound in a pod, whose address Kubernetes assigns; leave it empty "
                  "(ecps k8s binds every role to 0.0.0.0)");
  }
  if (!spec.cluster.advertise.empty()) {
    return refuse("cluster.advertise: ", spec.cluster.advertise,
                  " would be one address for every pod; leave it empty (each server pod "
                  "advertises its own DNS name, <pod>.", spec.job.name, "-server.",
                  k8s.namespace_name, ".svc)");
  }
  if (!spec.cluster.coordinator.empty()) {
    return refuse("cluster.coordinator: ", spec.cluster.coordinator,
                  ": leave it empty; in Kubernetes the roles reach the coordinator through its "
                  "Service, ", spec.job.name, "-coordinator.", k8s.namespace_name, ".svc");
  }
  if (!spec.faults.empty()) {
    return refuse("faults[0]: ", spec.faults[0].action,
                  " drills are run by `ecps run`'s launcher, which a Kubernetes job does not "
                  "have; remove faults: (to drill by hand, `ecps kill ADDR server N` against "
                  "the coordinator's Service)");
  }
  if (!spec.job.resume_from.empty()) {
    return refuse("job.resume_from: ecps k8s cannot resume a job yet: the path is checked on "
                  "this machine, and the pods would read it from their own volumes");
  }
  const CheckpointSection& checkpoint = spec.fault_tolerance.checkpoint;
  std::string saves;
  if (spec.fault_tolerance.mode == FaultToleranceMode::kCheckpoint) {
    saves = "fault_tolerance.mode is checkpoint";
  } else if (checkpoint.interval_steps > 0) {
    saves = absl::StrCat("fault_tolerance.checkpoint.interval_steps is ",
                         checkpoint.interval_steps);
  } else if (checkpoint.interval_seconds > 0) {
    saves = "fault_tolerance.checkpoint.interval_seconds is set";
  } else if (checkpoint.save_final) {
    saves = "fault_tolerance.checkpoint.save_final is true";
  }
  if (!saves.empty() && k8s.checkpoint_claim.empty()) {
    return refuse("k8s.checkpoint_claim: empty, but ", saves,
                  ": the coordinator and every server write each checkpoint together, into the "
                  "same files under fault_tolerance.checkpoint.dir, so it must be a volume all "
                  "their pods share; name a ReadWriteMany PersistentVolumeClaim in "
                  "k8s.checkpoint_claim (or, for a job without checkpoints, set "
                  "fault_tolerance.checkpoint.save_final: false)");
  }
  const int metrics = MetricsPort(spec);
  for (PodRole role : {PodRole::kCoordinator, PodRole::kServer, PodRole::kWorker}) {
    if (metrics == RolePort(spec, role)) {
      return refuse("monitoring.metrics_port: ", metrics, " is the ", RoleName(role),
                    "s' gRPC port in their pods (ecps k8s: coordinator ", CoordinatorPort(spec),
                    ", servers ", kK8sServerPort, ", workers ", kK8sWorkerPort,
                    "); choose another, or 0 for ", kK8sMetricsPort);
    }
  }
  return absl::OkStatus();
}

JobSpec K8sPodSpec(const JobSpec& spec) {
  const Names n(spec);
  JobSpec pod = spec;
  pod.path.clear();
  pod.job.token.clear();
  pod.cluster.host = "0.0.0.0";
  pod.cluster.coordinator_port = CoordinatorPort(spec);
  pod.cluster.coordinator = n.coordinator_address;
  pod.monitoring.metrics_port = MetricsPort(spec);
  pod.monitoring.progress = false;  // nobody watches a pod's terminal
  pod.fault_tolerance.checkpoint.dir = PodPath(spec.fault_tolerance.checkpoint.dir);
  if (spec.security.tls.enabled()) {
    // One spec for every pod: each role's entry names the pod's mount, where a pod holds its
    // own role's files (a role checks at start that the certificate's CN is its role).
    TlsSection& tls = pod.security.tls;
    tls.ca = kK8sTlsCa;
    for (TlsPair* pair : {&tls.coordinator, &tls.server, &tls.worker}) {
      *pair = TlsPair{kK8sTlsCert, kK8sTlsKey};
    }
    tls.admin = TlsPair{};
  }
  return pod;
}

absl::StatusOr<std::vector<TlsIdentity>> LoadK8sTls(const JobSpec& spec) {
  std::vector<TlsIdentity> out;
  if (!spec.security.tls.enabled()) return out;
  for (Role role : kPodRoles) {
    absl::StatusOr<TlsIdentity> identity =
        LoadTlsIdentity(TlsFilesFor(spec.security.tls, role), role);
    if (!identity.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("security.tls: ", identity.status().message()));
    }
    out.push_back(*std::move(identity));
  }
  return out;
}

absl::StatusOr<std::vector<K8sManifest>> K8sManifests(const JobSpec& spec, const std::string& token,
                                                      const std::vector<TlsIdentity>& tls,
                                                      const std::string& spec_source) {
  if (absl::Status s = CheckK8sSpec(spec); !s.ok()) return s;
  if (!IsValidToken(token)) {
    return absl::InvalidArgumentError(
        "the job token must be 1 to 256 printable ASCII characters without spaces");
  }
  std::vector<const TlsIdentity*> tls_secrets;
  if (spec.security.tls.enabled()) {
    for (Role role : kPodRoles) {
      auto it = std::find_if(tls.begin(), tls.end(),
                             [role](const TlsIdentity& id) { return id.role == role; });
      if (it == tls.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("security.tls: no certificate loaded for the ", RoleName(role)));
      }
      tls_secrets.push_back(&*it);
    }
  }
  const Names n(spec);
  const std::string header = absl::StrCat(
      "# Written by `ecps k8s` from ", spec_source.empty() ? "a spec" : spec_source,
      ". Apply the folder: kubectl apply -f DIR\n");
  std::vector<K8sManifest> out;
  auto add = [&](const char* file, const char* kind, const std::string& name, const Yaml& y,
                 const std::string& note = "") {
    out.push_back(K8sManifest{file, kind, name, Render(y, header + note)});
  };
  add(kConfigMapFile, "ConfigMap", n.spec_map, ConfigMap(spec, n),
      "# The spec every role reads (" + std::string(kK8sSpecPath) + ").\n");
  add(kSecretFile, "Secret", n.token_secret, Secret(n, token),
      "# The job token, ECPS_TOKEN in every pod. Keep this file private.\n");
  for (const TlsIdentity* identity : tls_secrets) {
    const Role role = identity->role;
    add(TlsSecretFile(role), "Secret", n.TlsSecret(role), TlsSecret(n, *identity),
        absl::StrCat("# The ", RoleName(role), " pods' certificate and key, at ", kK8sTlsDir,
                     ". Keep this file private.\n"));
  }
  add(kCoordinatorServiceFile, "Service", n.coordinator,
      Service(n, n.coordinator, PodRole::kCoordinator, CoordinatorPort(spec), false),
      absl::StrCat("# The coordinator's address for every role: ", n.coordinator_address, "\n"));
  add(kCoordinatorSetFile, "StatefulSet", n.coordinator, CoordinatorSet(spec, n),
      absl::StrCat("# The coordinator, started again when it dies; its state claim (", kStateVolume,
                   "-", n.coordinator,
                   "-0) lets the new one take the job over.\n# After the "
                   "job ended it serves the final status until deleted.\n"));
  add(kServerServiceFile, "Service", n.server,
      Service(n, n.server, PodRole::kServer, kK8sServerPort, true),
      absl::StrCat("# Stable DNS names for servers and spares: <pod>.", n.server_domain, "\n"));
  add(kServerSetFile, "StatefulSet", n.server, ServerSet(spec, n, PodRole::kServer),
      absl::StrCat("# Pod ", n.server, "-N asks for server id N.\n"));
  if (spec.cluster.spares > 0) {
    add(kSpareSetFile, "StatefulSet", n.spare, ServerSet(spec, n, PodRole::kSpare),
        "# Standby servers (--id -1): the coordinator hands a dead server's id to one.\n");
  }
  add(kWorkerJobFile, "Job", n.worker, WorkerJob(spec, n),
      "# Pod completion index N is worker N.\n");
  return out;
}

std::string RandomK8sToken() {
  // As `ecps run` makes its token (cli/launcher.cc).
  std::random_device rd;
  std::string token;
  const char* hex = "0123456789abcdef";
  for (int i = 0; i < 32; ++i) token += hex[rd() % 16];
  return token;
}

int RunK8sCommand(const std::string& spec_path, const std::string& dir) {
  auto spec = LoadSpecFile(spec_path);
  if (!spec.ok()) {
    std::fprintf(stderr, "ecps k8s: invalid spec:\n%s\n",
                 std::string(spec.status().message()).c_str());
    return 2;
  }
  if (absl::Status s = CheckK8sSpec(*spec); !s.ok()) {
    std::fprintf(stderr, "ecps k8s: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  const std::string out_dir = dir.empty() ? (fs::path(spec->job.output_dir) / "k8s").string() : dir;
  std::string token = spec->job.token;
  bool kept = false;
  if (token.empty()) {
    token = EarlierToken(out_dir);
    kept = !token.empty();
    if (!kept) token = RandomK8sToken();
  }
  absl::StatusOr<std::vector<TlsIdentity>> tls = LoadK8sTls(*spec);
  if (!tls.ok()) {
    std::fprintf(stderr, "ecps k8s: %s\n", std::string(tls.status().message()).c_str());
    return 2;
  }
  auto manifests = K8sManifests(*spec, token, *tls, spec_path);
  if (!manifests.ok()) {
    std::fprintf(stderr, "ecps k8s: %s\n", std::string(manifests.status().message()).c_str());
    return 2;
  }
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) {
    std::fprintf(stderr, "ecps k8s: cannot create %s: %s\n", out_dir.c_str(),
                 ec.message().c_str());
    return 2;
  }
  std::set<std::string> written;
  for (const K8sManifest& m : *manifests) {
    const std::string path = (fs::path(out_dir) / m.file).string();
    // The Secret holds the job's credential: for its owner only.
    if (absl::Status s = WriteFile(path, m.yaml, m.kind == "Secret" ? 0600 : 0644); !s.ok()) {
      std::fprintf(stderr, "ecps k8s: cannot write %s\n", std::string(s.message()).c_str());
      return 2;
    }
    written.insert(m.file);
    std::printf("ecps k8s: wrote %s (%s %s)\n", path.c_str(), m.kind.c_str(), m.name.c_str());
  }
  // An object an earlier run wrote that this spec does not want must not be applied again.
  for (const char* file : kAllFiles) {
    const fs::path stale = fs::path(out_dir) / file;
    if (!written.count(file) && fs::remove(stale, ec)) {
      std::printf("ecps k8s: removed %s (this spec has no such object)\n", stale.c_str());
    }
  }
  if (kept) {
    std::printf("ecps k8s: kept the job token of the Secret already in %s (delete %s for a new "
                "one)\n", out_dir.c_str(), kSecretFile);
  }
  if (spec->data.source != DataSourceType::kSynthetic) {
    std::printf("ecps k8s: note: the pods read data.paths (%s, ...) at those paths in the image; "
                "no data volume is mounted\n", spec->data.paths.front().c_str());
  }
  const std::string& ns = spec->k8s.namespace_name;
  std::printf(
      "apply them with: kubectl apply -f %s\n"
      "wait for the end: kubectl -n %s wait --for=condition=complete job/%s-worker "
      "--timeout=-1s\n",
      out_dir.c_str(), ns.c_str(), spec->job.name.c_str());
  return 0;
}

}  // namespace ecps
