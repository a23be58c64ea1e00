// `ecps k8s SPEC [-o DIR]`: the Kubernetes objects that run a job, one file per object,
// written from the spec (its k8s: section names the image, the namespace, the resources;
// docs/deploy.md, "On Kubernetes"). Nothing here talks to a cluster: the files are for
// `kubectl apply -f DIR`.
//
// The objects: a ConfigMap with the spec the pods read, a Secret with the job token (with
// security.tls, also one Secret per role with its certificate and key), the coordinator (a
// StatefulSet of one pod with a claim for its state log, and a Service in front of it), the
// servers (a StatefulSet whose pod ordinal
// is the server id, and a headless Service that gives each pod a stable DNS name), the spares
// (a StatefulSet of their own) and the workers (an Indexed Job whose completion index is the
// worker id).
//
// Each object is built as a value (cli/k8s_objects.h; cli/k8s_workloads.h builds them) and
// written by one serializer (cli/k8s_yaml.h).
#ifndef ECPS_CLI_K8S_MANIFESTS_H_
#define ECPS_CLI_K8S_MANIFESTS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/security.h"
#include "runtime/spec.h"

namespace ecps {

// The ports the roles listen on inside their pods: fixed, so that Services and probes can
// name them.
inline constexpr int kK8sCoordinatorPort = 7070;  // when cluster.coordinator_port is 0
inline constexpr int kK8sServerPort = 7071;       // servers and spares
inline constexpr int kK8sWorkerPort = 7072;       // the workers' gRPC health service
inline constexpr int kK8sMetricsPort = 9400;      // when monitoring.metrics_port is 0
// Where the pods find the spec (the ConfigMap's mount) and what relative paths in it are
// relative to (deploy/Containerfile's WORKDIR, made the pods' working directory).
inline constexpr char kK8sSpecPath[] = "/etc/ecps/spec.yaml";
inline constexpr char kK8sWorkDir[] = "/srv/ecps";
// Where the coordinator's pod mounts its state claim, and its --state-dir in there: a folder
// of its own, since the log owns every file of its folder and a new volume may hold others
// (lost+found).
inline constexpr char kK8sStateMount[] = "/var/lib/ecps";
inline constexpr char kK8sStateDir[] = "/var/lib/ecps/coordinator-state";
// With security.tls, where a pod finds its role's certificate: its role's Secret, mounted
// read-only, with the file names of a kubernetes.io/tls Secret. The spec the pods read names
// these for every role; each pod holds its own role's files there and no other's.
inline constexpr char kK8sTlsDir[] = "/etc/ecps-tls";
inline constexpr char kK8sTlsCa[] = "/etc/ecps-tls/ca.crt";
inline constexpr char kK8sTlsCert[] = "/etc/ecps-tls/tls.crt";
inline constexpr char kK8sTlsKey[] = "/etc/ecps-tls/tls.key";

// One object, one file of DIR.
struct K8sManifest {
  std::string file;  // "21-server.statefulset.yaml"
  std::string kind;  // "StatefulSet"
  std::string name;  // "quickstart-server"
  std::string yaml;  // the file's text: a comment, then one YAML document
};

// OK when `spec` can run on Kubernetes as ecps k8s writes it; otherwise INVALID_ARGUMENT
// naming the key and what to do (an empty k8s.image, a job name that cannot name Kubernetes
// objects, fault drills, which only `ecps run` performs, checkpoints without a shared
// volume, ...).
absl::Status CheckK8sSpec(const JobSpec& spec);

// The spec the pods read: the coordinator's Service as cluster.coordinator, the fixed ports,
// every interface bound, absolute checkpoint paths, no token (the Secret holds it) and, with
// security.tls, the TLS files at the pods' mount (kK8sTlsCa, ...) and no admin certificate.
JobSpec K8sPodSpec(const JobSpec& spec);

// With security.tls, what the pods' Secrets hold: the coordinator's, the servers' and the
// workers' files, read and checked as each role checks its own at start (LoadTlsIdentity:
// the CN is the role, the key is the certificate's, valid now, chaining to the CA), in that
// order. Empty without TLS. INVALID_ARGUMENT naming the file and the problem.
absl::StatusOr<std::vector<TlsIdentity>> LoadK8sTls(const JobSpec& spec);

// Every object for `spec` in the order `kubectl apply -f DIR` should create them (the file
// names sort that way). `token` goes into the Secret (it must not be empty); `tls` (from
// LoadK8sTls) into one Secret per role, and must have an identity for each of the three pod
// roles when the spec has security.tls. `spec_source` names the spec file in the files' first
// comment. INVALID_ARGUMENT as CheckK8sSpec, or for a missing identity.
absl::StatusOr<std::vector<K8sManifest>> K8sManifests(const JobSpec& spec, const std::string& token,
                                                      const std::vector<TlsIdentity>& tls,
                                                      const std::string& spec_source);

// A fresh random job token, as `ecps run` makes one (32 hex digits).
std::string RandomK8sToken();

// The command: writes the files into `dir` (empty: <job.output_dir>/k8s), removing files of
// an earlier run that this spec no longer has (a spare StatefulSet when spares went to 0), and
// keeps the token of an earlier run's Secret in `dir` when job.token is empty, so that
// re-applying does not lock restarted pods out of a running job. Prints what it wrote and the
// kubectl line. Returns the exit code (2: a bad spec or one Kubernetes cannot run).
int RunK8sCommand(const std::string& spec_path, const std::string& dir);

}  // namespace ecps

#endif  // ECPS_CLI_K8S_MANIFESTS_H_
