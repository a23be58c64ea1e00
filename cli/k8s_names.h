// What every object of `ecps k8s` agrees on: the roles that run in pods, the objects' names
// and the ports the roles listen on in their pods (cli/k8s_manifests.h has the fixed ones).
#ifndef ECPS_CLI_K8S_NAMES_H_
#define ECPS_CLI_K8S_NAMES_H_

#include <string>

#include "runtime/security.h"
#include "runtime/spec.h"

namespace ecps::k8s {

// The roles that run in pods: a spare is a server that waits for a dead server's id.
enum class PodRole { kCoordinator, kServer, kSpare, kWorker };

// "coordinator", "server", "spare", "worker": the container's name and the component label.
const char* PodRoleName(PodRole role);

// The credentials a role's pods hold: a spare's are a server's (it becomes one).
Role CredentialRole(PodRole role);

// The coordinator's state claim: its volumeClaimTemplate, and the volume its pod mounts.
inline constexpr char kStateVolume[] = "state";

// The names every object uses, from job.name and k8s.namespace.
struct Names {
  explicit Names(const JobSpec& spec);

  // With security.tls, the Secret of `role`'s certificate: <job>-<role>-tls.
  std::string TlsSecret(Role role) const;

  std::string job, ns, spec_map, token_secret, coordinator, server, spare, worker;
  // Servers and spares share the headless Service of the servers: every parameter server,
  // standing or spare, is <pod>.<job>-server.<namespace>.svc.
  std::string server_domain;
  // The coordinator's Service, host:port, for every role.
  std::string coordinator_address;
};

// The coordinator's port: cluster.coordinator_port, or kK8sCoordinatorPort for 0.
int CoordinatorPort(const JobSpec& spec);

// The metrics port: monitoring.metrics_port, or kK8sMetricsPort for 0; -1: no metrics.
int MetricsPort(const JobSpec& spec);

// The port of `role`'s gRPC server in its pod.
int RolePort(const JobSpec& spec, PodRole role);

// `path` in a pod: a relative path means the same as under `ecps run` started from the
// image's working directory (kK8sWorkDir).
std::string PodPath(const std::string& path);

}  // namespace ecps::k8s

#endif  // ECPS_CLI_K8S_NAMES_H_
