// The pods of `ecps k8s`: each role's pod template (its container, command, probes, resources
// and volumes) and the labels that tie the roles' objects to their pods.
#ifndef ECPS_CLI_K8S_PODS_H_
#define ECPS_CLI_K8S_PODS_H_

#include <string>

#include "cli/k8s_names.h"
#include "cli/k8s_objects.h"
#include "runtime/spec.h"

namespace ecps::k8s {

// The labels of a role's objects and pods.
StringMap Labels(const Names& n, PodRole role);

// What selects a role's pods: some of Labels(n, role).
StringMap SelectorLabels(const Names& n, PodRole role);

// What the headless Service of the servers selects: servers and spares alike (a spare
// becomes a server).
StringMap ParameterServerLabels(const Names& n);

// The labels of the objects of no one role (the ConfigMap, the Secrets).
StringMap JobLabels(const Names& n);

// The pod template of `role` for `spec` (which CheckK8sSpec accepted); `restart_policy` is
// Always for a StatefulSet's pods, Never for the workers' Job's.
PodTemplateSpec PodTemplate(const JobSpec& spec, const Names& n, PodRole role,
                            const std::string& restart_policy);

}  // namespace ecps::k8s

#endif  // ECPS_CLI_K8S_PODS_H_
