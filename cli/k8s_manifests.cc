#include "cli/k8s_manifests.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "cli/k8s_names.h"
#include "cli/k8s_objects.h"
#include "cli/k8s_workloads.h"
#include "cli/k8s_yaml.h"
#include "cli/role_security.h"
#include "runtime/net.h"
#include "runtime/security.h"
#include "yaml-cpp/yaml.h"

namespace ecps {
namespace {

namespace fs = std::filesystem;
using k8s::PodRole;

// Kubernetes' names built from the job's must stay DNS labels: <job>-server-<ordinal> and the
// StatefulSet's controller-revision-hash label (<job>-server-<10 characters>) are the
// longest, within 63 characters up to 45 for the job.
constexpr size_t kMaxJobName = 45;

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

// The roles that run in pods, in the order of their TLS Secrets (LoadK8sTls); the admin's
// certificate stays with the operators.
constexpr Role kPodRoles[] = {Role::kCoordinator, Role::kServer, Role::kWorker};

const char* TlsSecretFile(Role role) {
  return role == Role::kCoordinator ? kCoordinatorTlsFile
         : role == Role::kServer    ? kServerTlsFile
                                    : kWorkerTlsFile;
}

// One object before it is written: its file and the comment above it.
struct PlannedManifest {
  const char* file;
  std::string note;  // lines of comment, each ending with a newline
  k8s::Object object;
};

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

template <typename... Parts>
absl::Status Refuse(const Parts&... parts) {
  return absl::InvalidArgumentError(absl::StrCat(parts...));
}

// The image, and the job's name, from which every object's is made.
absl::Status CheckNames(const JobSpec& spec) {
  if (spec.k8s.image.empty()) {
    return Refuse(
        "k8s.image: empty; ecps k8s needs the container image that holds ecps on its "
        "PATH (deploy/Containerfile builds one), e.g. k8s: {image: "
        "registry.example.org/ecps:1.0}");
  }
  if (spec.job.name.size() > kMaxJobName || !IsServiceLabel(spec.job.name)) {
    return Refuse("job.name: ecps k8s names Kubernetes objects and DNS names after the job (",
                  spec.job.name, "-coordinator, ", spec.job.name,
                  "-server-0, ...), so it must be at most ", kMaxJobName,
                  " lower-case letters, digits and -, starting with a letter and not ending "
                  "with -; got \"",
                  spec.job.name, "\"");
  }
  return absl::OkStatus();
}

// The addresses: Kubernetes assigns the pods', ecps k8s the Services'.
absl::Status CheckAddresses(const JobSpec& spec) {
  const std::string& ns = spec.k8s.namespace_name;
  if (!spec.cluster.host.empty() && !IsWildcardHost(spec.cluster.host)) {
    return Refuse("cluster.host: ", spec.cluster.host,
                  " cannot be bound in a pod, whose address Kubernetes assigns; leave it empty "
                  "(ecps k8s binds every role to 0.0.0.0)");
  }
  if (!spec.cluster.advertise.empty()) {
    return Refuse("cluster.advertise: ", spec.cluster.advertise,
                  " would be one address for every pod; leave it empty (each server pod "
                  "advertises its own DNS name, <pod>.",
                  spec.job.name, "-server.", ns, ".svc)");
  }
  if (!spec.cluster.coordinator.empty()) {
    return Refuse("cluster.coordinator: ", spec.cluster.coordinator,
                  ": leave it empty; in Kubernetes the roles reach the coordinator through its "
                  "Service, ",
                  spec.job.name, "-coordinator.", ns, ".svc");
  }
  return absl::OkStatus();
}

// What only `ecps run` does: drills, and resuming from a path on this machine.
absl::Status CheckRunOnly(const JobSpec& spec) {
  if (!spec.faults.empty()) {
    return Refuse("faults[0]: ", ToString(spec.faults[0].action),
                  " drills are run by `ecps run`'s launcher, which a Kubernetes job does not "
                  "have; remove faults: (to drill by hand, `ecps kill ADDR server N` against "
                  "the coordinator's Service)");
  }
  if (!spec.job.resume_from.empty()) {
    return Refuse(
        "job.resume_from: ecps k8s cannot resume a job yet: the path is checked on "
        "this machine, and the pods would read it from their own volumes");
  }
  return absl::OkStatus();
}

// A job that writes checkpoints needs one volume for the coordinator and every server.
absl::Status CheckCheckpoints(const JobSpec& spec) {
  const CheckpointSection& checkpoint = spec.fault_tolerance.checkpoint;
  std::string saves;
  if (spec.fault_tolerance.mode == FaultToleranceMode::kCheckpoint) {
    saves = "fault_tolerance.mode is checkpoint";
  } else if (checkpoint.interval_steps > 0) {
    saves =
        absl::StrCat("fault_tolerance.checkpoint.interval_steps is ", checkpoint.interval_steps);
  } else if (checkpoint.interval_seconds > 0) {
    saves = "fault_tolerance.checkpoint.interval_seconds is set";
  } else if (checkpoint.save_final) {
    saves = "fault_tolerance.checkpoint.save_final is true";
  }
  if (!saves.empty() && spec.k8s.checkpoint_claim.empty()) {
    return Refuse("k8s.checkpoint_claim: empty, but ", saves,
                  ": the coordinator and every server write each checkpoint together, into the "
                  "same files under fault_tolerance.checkpoint.dir, so it must be a volume all "
                  "their pods share; name a ReadWriteMany PersistentVolumeClaim in "
                  "k8s.checkpoint_claim (or, for a job without checkpoints, set "
                  "fault_tolerance.checkpoint.save_final: false)");
  }
  return absl::OkStatus();
}

// The metrics port must not be a role's gRPC port in its pod.
absl::Status CheckPorts(const JobSpec& spec) {
  const int metrics = k8s::MetricsPort(spec);
  for (PodRole role : {PodRole::kCoordinator, PodRole::kServer, PodRole::kWorker}) {
    if (metrics == k8s::RolePort(spec, role)) {
      return Refuse("monitoring.metrics_port: ", metrics, " is the ", k8s::PodRoleName(role),
                    "s' gRPC port in their pods (ecps k8s: coordinator ",
                    k8s::CoordinatorPort(spec), ", servers ", kK8sServerPort, ", workers ",
                    kK8sWorkerPort, "); choose another, or 0 for ", kK8sMetricsPort);
    }
  }
  return absl::OkStatus();
}

bool IsValidToken(const std::string& token) {
  if (token.empty() || token.size() > 256) return false;
  return std::all_of(token.begin(), token.end(), [](char c) { return c > 0x20 && c < 0x7f; });
}

// With security.tls, each pod role's identity in `tls`, in kPodRoles' order.
absl::StatusOr<std::vector<const TlsIdentity*>> TlsSecretsOf(const JobSpec& spec,
                                                             const std::vector<TlsIdentity>& tls) {
  std::vector<const TlsIdentity*> out;
  if (!spec.security.tls.enabled()) return out;
  for (Role role : kPodRoles) {
    auto it = std::find_if(tls.begin(), tls.end(),
                           [role](const TlsIdentity& id) { return id.role == role; });
    if (it == tls.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("security.tls: no certificate loaded for the ", RoleName(role)));
    }
    out.push_back(&*it);
  }
  return out;
}

// Every object of the job, in the order of their files.
std::vector<PlannedManifest> PlanManifests(const JobSpec& spec, const std::string& token,
                                           const std::vector<const TlsIdentity*>& tls) {
  const k8s::Names n(spec);
  std::vector<PlannedManifest> plan;
  plan.push_back({kConfigMapFile,
                  absl::StrCat("# The spec every role reads (", kK8sSpecPath, ").\n"),
                  k8s::SpecConfigMap(n, SpecToYaml(K8sPodSpec(spec)))});
  plan.push_back({kSecretFile,
                  "# The job token, ECPS_TOKEN in every pod. Keep this file private.\n",
                  k8s::TokenSecret(n, token)});
  for (const TlsIdentity* identity : tls) {
    plan.push_back(
        {TlsSecretFile(identity->role),
         absl::StrCat("# The ", RoleName(identity->role), " pods' certificate and key, at ",
                      kK8sTlsDir, ". Keep this file private.\n"),
         k8s::TlsSecret(n, *identity)});
  }
  plan.push_back(
      {kCoordinatorServiceFile,
       absl::StrCat("# The coordinator's address for every role: ", n.coordinator_address, "\n"),
       k8s::CoordinatorService(spec, n)});
  plan.push_back({kCoordinatorSetFile,
                  absl::StrCat("# The coordinator, started again when it dies; its state claim (",
                               k8s::kStateVolume, "-", n.coordinator,
                               "-0) lets the new one take the job over.\n# After the job ended it "
                               "serves the final status until deleted.\n"),
                  k8s::CoordinatorSet(spec, n)});
  plan.push_back(
      {kServerServiceFile,
       absl::StrCat("# Stable DNS names for servers and spares: <pod>.", n.server_domain, "\n"),
       k8s::ServerService(n)});
  plan.push_back({kServerSetFile, absl::StrCat("# Pod ", n.server, "-N asks for server id N.\n"),
                  k8s::ServerSet(spec, n, PodRole::kServer)});
  if (spec.cluster.spares > 0) {
    plan.push_back(
        {kSpareSetFile,
         "# Standby servers (--id -1): the coordinator hands a dead server's id to one.\n",
         k8s::ServerSet(spec, n, PodRole::kSpare)});
  }
  plan.push_back(
      {kWorkerJobFile, "# Pod completion index N is worker N.\n", k8s::WorkerJob(spec, n)});
  return plan;
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

// Writes `manifests` into `out_dir` (created) and removes the files of an earlier run that
// they do not include. Prints what it did; false after printing why it could not.
bool WriteManifests(const std::vector<K8sManifest>& manifests, const std::string& out_dir) {
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) {
    std::fprintf(stderr, "ecps k8s: cannot create %s: %s\n", out_dir.c_str(), ec.message().c_str());
    return false;
  }
  std::set<std::string> written;
  for (const K8sManifest& m : manifests) {
    const std::string path = (fs::path(out_dir) / m.file).string();
    // The Secret holds the job's credential: for its owner only.
    if (absl::Status s = WriteFile(path, m.yaml, m.kind == "Secret" ? 0600 : 0644); !s.ok()) {
      std::fprintf(stderr, "ecps k8s: cannot write %s\n", std::string(s.message()).c_str());
      return false;
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
  return true;
}

}  // namespace

absl::Status CheckK8sSpec(const JobSpec& spec) {
  for (auto check : {CheckNames, CheckAddresses, CheckRunOnly, CheckCheckpoints, CheckPorts}) {
    if (absl::Status s = check(spec); !s.ok()) return s;
  }
  return absl::OkStatus();
}

JobSpec K8sPodSpec(const JobSpec& spec) {
  const k8s::Names n(spec);
  JobSpec pod = spec;
  pod.path.clear();
  pod.job.token.clear();
  pod.cluster.host = "0.0.0.0";
  pod.cluster.coordinator_port = k8s::CoordinatorPort(spec);
  pod.cluster.coordinator = n.coordinator_address;
  pod.monitoring.metrics_port = k8s::MetricsPort(spec);
  pod.monitoring.progress = false;  // nobody watches a pod's terminal
  pod.fault_tolerance.checkpoint.dir = k8s::PodPath(spec.fault_tolerance.checkpoint.dir);
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
  absl::StatusOr<std::vector<const TlsIdentity*>> tls_secrets = TlsSecretsOf(spec, tls);
  if (!tls_secrets.ok()) return tls_secrets.status();
  // Every object is built first, then each written by the one serializer.
  const std::vector<PlannedManifest> plan = PlanManifests(spec, token, *tls_secrets);
  const std::string header =
      absl::StrCat("# Written by `ecps k8s` from ", spec_source.empty() ? "a spec" : spec_source,
                   ". Apply the folder: kubectl apply -f DIR\n");
  std::vector<K8sManifest> out;
  for (const PlannedManifest& m : plan) {
    out.push_back(K8sManifest{m.file, k8s::ObjectKind(m.object), k8s::ObjectName(m.object),
                              absl::StrCat(header, m.note, k8s::K8sObjectYaml(m.object))});
  }
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
  if (!WriteManifests(*manifests, out_dir)) return 2;
  if (kept) {
    std::printf(
        "ecps k8s: kept the job token of the Secret already in %s (delete %s for a new "
        "one)\n",
        out_dir.c_str(), kSecretFile);
  }
  if (spec->data.source != DataSourceType::kSynthetic) {
    std::printf(
        "ecps k8s: note: the pods read data.paths (%s, ...) at those paths in the image; "
        "no data volume is mounted\n",
        spec->data.paths.front().c_str());
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
