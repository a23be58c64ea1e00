#include "cli/k8s_workloads.h"

#include <algorithm>
#include <string>
#include <utility>

#include "cli/k8s_manifests.h"
#include "cli/k8s_pods.h"

namespace ecps::k8s {
namespace {

// The coordinator's state claim (its volumeClaimTemplate kStateVolume): the log holds a few
// snapshots of some KiB; 1Gi is the least many provisioners hand out.
constexpr char kStateClaimSize[] = "1Gi";

ObjectMeta Metadata(const Names& n, const std::string& name, StringMap labels) {
  return ObjectMeta{.name = name, .namespace_name = n.ns, .labels = std::move(labels)};
}

Service RoleService(const Names& n, const std::string& name, PodRole role, int port) {
  return Service{
      .metadata = Metadata(n, name, Labels(n, role)),
      // The roles find each other through these names from their first second, before any is
      // ready (a server is ready only once the whole cluster has met), and must keep reaching
      // one that reports not ready: readiness is for people and `kubectl wait`, not routing.
      .spec = {.publish_not_ready_addresses = true,
               .selector = SelectorLabels(n, role),
               .ports = {{.name = "grpc", .port = port, .target_port = "grpc"}}}};
}

}  // namespace

ConfigMap SpecConfigMap(const Names& n, const std::string& pod_spec_yaml) {
  return ConfigMap{.metadata = Metadata(n, n.spec_map, JobLabels(n)),
                   .data = {{"spec.yaml", pod_spec_yaml}}};
}

// `token`: the job secret (the coordinator's and the servers'); `worker-token`: the workers'
// role token; `admin-token`: the operators' (ecps status|scrub|kill|checkpoint). Each pod
// mounts only its own key (cli/k8s_pods.cc, SecretEnv).
Secret TokenSecret(const Names& n, const std::string& token) {
  return Secret{.metadata = Metadata(n, n.token_secret, JobLabels(n)),
                .type = "Opaque",
                .string_data = {{"token", token},
                                {"worker-token", RoleToken(token, Role::kWorker)},
                                {"admin-token", RoleToken(token, Role::kAdmin)}}};
}

// Under the names of a kubernetes.io/tls Secret (which cert-manager, say, can issue instead):
// the pods of that role mount it at kK8sTlsDir.
Secret TlsSecret(const Names& n, const TlsIdentity& identity) {
  return Secret{.metadata = Metadata(n, n.TlsSecret(identity.role), JobLabels(n)),
                .type = "kubernetes.io/tls",
                .string_data = {{"tls.crt", identity.cert_pem},
                                {"tls.key", identity.key_pem},
                                {"ca.crt", identity.ca_pem}}};
}

// Not headless: the roles dial the Service's stable address.
Service CoordinatorService(const JobSpec& spec, const Names& n) {
  return RoleService(n, n.coordinator, PodRole::kCoordinator, CoordinatorPort(spec));
}

// It governs the spares' StatefulSet too, and selects servers and spares alike.
Service ServerService(const Names& n) {
  Service service = RoleService(n, n.server, PodRole::kServer, kK8sServerPort);
  service.spec.cluster_ip = "None";
  service.spec.selector = ParameterServerLabels(n);
  return service;
}

// A StatefulSet of one pod, which Kubernetes starts again when it dies (restartPolicy Always,
// on this node or, once the pod is deleted, another), with a claim of its own from a
// volumeClaimTemplate for --state-dir: the claim outlives the pod, so the new coordinator
// takes the job over from the state log. A StatefulSet rather than a Deployment: it never
// runs two pods of one identity (a replacement waits until the old pod is gone, also from a
// node that stopped answering), which is what a single-writer log needs; a Deployment's
// ReplicaSet starts a new pod as soon as the old one is terminating. A coordinator started
// again after the job ended restores FINISHED or FAILED, which are final, and starts nothing;
// with --linger-ms -1 it then serves that status until deleted.
StatefulSet CoordinatorSet(const JobSpec& spec, const Names& n) {
  // No storageClassName: the cluster's default StorageClass.
  PersistentVolumeClaim claim{
      .metadata = {.name = kStateVolume, .labels = Labels(n, PodRole::kCoordinator)},
      .spec = {.access_modes = {"ReadWriteOnce"},
               .resources = {.requests = {{"storage", kStateClaimSize}}}}};
  return StatefulSet{
      .metadata = Metadata(n, n.coordinator, Labels(n, PodRole::kCoordinator)),
      .spec = {.service_name = n.coordinator,
               .replicas = 1,
               // As for the servers: a changed template applies to a pod deleted by hand, not
               // to the coordinator of a running job.
               .update_strategy_type = "OnDelete",
               .selector = {.match_labels = SelectorLabels(n, PodRole::kCoordinator)},
               .pod_template = PodTemplate(spec, n, PodRole::kCoordinator, "Always"),
               .volume_claim_templates = {std::move(claim)}}};
}

StatefulSet ServerSet(const JobSpec& spec, const Names& n, PodRole role) {
  const bool spare = role == PodRole::kSpare;
  return StatefulSet{
      .metadata = Metadata(n, spare ? n.spare : n.server, Labels(n, role)),
      .spec = {.service_name = n.server,
               .replicas = spare ? spec.cluster.spares : spec.cluster.servers,
               // All at once: OrderedReady would start server-1 only when server-0 is ready,
               // and no server is ready before every server has registered.
               .pod_management_policy = "Parallel",
               // A change of the template (a new image, other resources) must not restart the
               // servers of a running job one by one, each a failure to recover from: it
               // applies to pods deleted by hand, or to the next job.
               .update_strategy_type = "OnDelete",
               .selector = {.match_labels = SelectorLabels(n, role)},
               .pod_template = PodTemplate(spec, n, role, "Always")}};
}

// Completion index = worker id. A pod that fails (a crash, `ecps kill worker N`, a
// replacement refused while the coordinator still holds the dead worker's id) is replaced
// by a new pod with the same index, which resumes the dead worker's partition; each failure
// counts against backoffLimit, so it allows three per worker. A pod evicted or preempted
// (DisruptionTarget) does not count; a worker that exits 2 (a bad spec or flag) fails the Job
// at once, since its replacements would too.
Job WorkerJob(const JobSpec& spec, const Names& n) {
  const int workers = spec.cluster.workers;
  return Job{.metadata = Metadata(n, n.worker, Labels(n, PodRole::kWorker)),
             .spec = {.completion_mode = "Indexed",
                      .completions = workers,
                      .parallelism = workers,
                      .backoff_limit = std::max(6, 3 * workers),
                      .pod_failure_policy =
                          {{.action = "FailJob",
                            .on_exit_codes =
                                PodFailurePolicyOnExitCodes{
                                    .container_name = "worker", .op = "In", .values = {2}}},
                           {.action = "Ignore",
                            .on_pod_conditions = {{.type = "DisruptionTarget", .status = "True"}}}},
                      .pod_template = PodTemplate(spec, n, PodRole::kWorker, "Never")}};
}

}  // namespace ecps::k8s
