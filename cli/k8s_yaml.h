// The one writer of `ecps k8s`'s YAML: an object of cli/k8s_objects.h as one YAML document.
#ifndef ECPS_CLI_K8S_YAML_H_
#define ECPS_CLI_K8S_YAML_H_

#include <string>

#include "cli/k8s_objects.h"

namespace ecps::k8s {

// "ConfigMap", "Secret", "Service", "StatefulSet" or "Job".
const char* ObjectKind(const Object& object);

// The object's metadata.name.
const std::string& ObjectName(const Object& object);

// `object` as one YAML document in block style, apiVersion and kind first, ending with a
// newline. Every string reads back as that same string in a YAML 1.1 reader (kubectl's) and
// a YAML 1.2 one: one that would read as another type ("9400", "true", "0600", "1e3", "null",
// "") is double-quoted, as is one that a plain scalar cannot hold (": ", "#", a leading "-",
// quotes, control characters); a string of several lines that ends with one newline is a
// literal block (|), any other is double-quoted with its line breaks escaped. Map keys that
// come from the spec (labels, node selectors) follow the same rules.
std::string K8sObjectYaml(const Object& object);

}  // namespace ecps::k8s

#endif  // ECPS_CLI_K8S_YAML_H_
