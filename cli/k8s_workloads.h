// The objects of `ecps k8s`, each built from the spec (which CheckK8sSpec accepted) as a
// value of cli/k8s_objects.h; K8sManifests (cli/k8s_manifests.h) puts them in order and
// writes them.
#ifndef ECPS_CLI_K8S_WORKLOADS_H_
#define ECPS_CLI_K8S_WORKLOADS_H_

#include <string>

#include "cli/k8s_names.h"
#include "cli/k8s_objects.h"
#include "runtime/security.h"
#include "runtime/spec.h"

namespace ecps::k8s {

// The ConfigMap of the spec the pods read, `pod_spec_yaml` (SpecToYaml of K8sPodSpec).
ConfigMap SpecConfigMap(const Names& n, const std::string& pod_spec_yaml);

// The job token's Secret: `token` (the coordinator's and the servers'), the workers' role
// token and the operators' admin token, each a key of its own.
Secret TokenSecret(const Names& n, const std::string& token);

// With security.tls, one role's certificate, key and CA as a kubernetes.io/tls Secret.
Secret TlsSecret(const Names& n, const TlsIdentity& identity);

// The coordinator's Service: one stable address for every role, whichever pod is behind it.
Service CoordinatorService(const JobSpec& spec, const Names& n);

// The servers' headless Service: a DNS name for each server and spare pod.
Service ServerService(const Names& n);

// The coordinator: a StatefulSet of one pod with a claim for its state log.
StatefulSet CoordinatorSet(const JobSpec& spec, const Names& n);

// The servers' StatefulSet (`role` kServer: pod ordinal = server id) or the spares'
// (kSpare).
StatefulSet ServerSet(const JobSpec& spec, const Names& n, PodRole role);

// The workers: an Indexed Job whose completion index is the worker id.
Job WorkerJob(const JobSpec& spec, const Names& n);

}  // namespace ecps::k8s

#endif  // ECPS_CLI_K8S_WORKLOADS_H_
