#include "cli/k8s_yaml.h"

#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/strings/ascii.h"
#include "yaml-cpp/yaml.h"

namespace ecps::k8s {
namespace {

// One Emit per type of k8s_objects.h, declared first so that the templates below find every
// one whichever order they are defined in.
void Emit(YAML::Emitter& out, const std::string& s);
void Emit(YAML::Emitter& out, const char* s);
void Emit(YAML::Emitter& out, int value);
void Emit(YAML::Emitter& out, bool value);
void Emit(YAML::Emitter& out, const StringMap& map);
void Emit(YAML::Emitter& out, const ObjectMeta& meta);
void Emit(YAML::Emitter& out, const EnvVar& env);
void Emit(YAML::Emitter& out, const ContainerPort& port);
void Emit(YAML::Emitter& out, const VolumeMount& mount);
void Emit(YAML::Emitter& out, const Probe& probe);
void Emit(YAML::Emitter& out, const ResourceRequirements& resources);
void Emit(YAML::Emitter& out, const Container& container);
void Emit(YAML::Emitter& out, const KeyToPath& item);
void Emit(YAML::Emitter& out, const Volume& volume);
void Emit(YAML::Emitter& out, const PodSecurityContext& context);
void Emit(YAML::Emitter& out, const PodSpec& pod);
void Emit(YAML::Emitter& out, const PodTemplateSpec& pod_template);
void Emit(YAML::Emitter& out, const PersistentVolumeClaim& claim);
void Emit(YAML::Emitter& out, const ServicePort& port);
void Emit(YAML::Emitter& out, const PodFailurePolicyRule& rule);

template <typename T>
void Emit(YAML::Emitter& out, const std::vector<T>& items) {
  out << YAML::BeginSeq;
  for (const T& item : items) Emit(out, item);
  out << YAML::EndSeq;
}

// A field: its key, then its value.
template <typename T>
void Field(YAML::Emitter& out, const char* key, const T& value) {
  out << YAML::Key << key << YAML::Value;
  Emit(out, value);
}

// A field that Kubernetes defaults when it is absent: left out when empty.
template <typename T>
void FieldUnlessEmpty(YAML::Emitter& out, const char* key, const T& value) {
  if (!value.empty()) Field(out, key, value);
}

template <typename T>
void FieldIfSet(YAML::Emitter& out, const char* key, const std::optional<T>& value) {
  if (value) Field(out, key, *value);
}

// Whether a YAML reader could take the plain scalar `s` for something other than a string:
// anything starting like a number (YAML 1.1 has 0600, 1_000, 1:20 and .5; YAML 1.2 has 1e3),
// the boolean and null words of YAML 1.1 (kubectl's), and its value (=) and merge (<<) keys.
bool ReadsAsAnotherType(const std::string& s) {
  if (s.empty() || absl::ascii_isdigit(static_cast<unsigned char>(s[0])) || s[0] == '+' ||
      s[0] == '-' || s[0] == '.') {
    return true;
  }
  const std::string lower = absl::AsciiStrToLower(s);
  for (const char* word :
       {"true", "false", "yes", "no", "on", "off", "y", "n", "null", "~", "=", "<<"}) {
    if (lower == word) return true;
  }
  return false;
}

// Whether a literal block (|) gives `s` back: its default (clip) chomping keeps exactly one
// final line break, the block's indentation is taken from its first line, which must not
// start with a blank, and its lines are read as they are, with no escapes.
bool FitsLiteralBlock(const std::string& s) {
  if (s.size() < 2 || s.back() != '\n' || s[s.size() - 2] == '\n') return false;
  if (s[0] == ' ' || s[0] == '\t' || s[0] == '\n') return false;
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c != '\n' && (u < 0x20 || u == 0x7f)) return false;
  }
  return true;
}

void Emit(YAML::Emitter& out, const std::string& s) {
  if (s.find('\n') != std::string::npos) {
    out << (FitsLiteralBlock(s) ? YAML::Literal : YAML::DoubleQuoted) << s;
  } else if (ReadsAsAnotherType(s)) {
    out << YAML::DoubleQuoted << s;
  } else {
    out << s;  // yaml-cpp quotes what a plain scalar cannot hold (": ", " #", quotes, ...)
  }
}

void Emit(YAML::Emitter& out, const char* s) { Emit(out, std::string(s)); }
void Emit(YAML::Emitter& out, int value) { out << value; }
void Emit(YAML::Emitter& out, bool value) { out << YAML::TrueFalseBool << value; }

void Emit(YAML::Emitter& out, const StringMap& map) {
  if (map.empty()) {
    out << YAML::Flow << YAML::BeginMap << YAML::EndMap;
    return;
  }
  out << YAML::BeginMap;
  for (const auto& [key, value] : map) {
    // A key is a string as a value is, but never a block.
    out << YAML::Key;
    if (key.find('\n') != std::string::npos || ReadsAsAnotherType(key)) out << YAML::DoubleQuoted;
    out << key << YAML::Value;
    Emit(out, value);
  }
  out << YAML::EndMap;
}

void Emit(YAML::Emitter& out, const ObjectMeta& meta) {
  out << YAML::BeginMap;
  FieldUnlessEmpty(out, "name", meta.name);
  FieldUnlessEmpty(out, "namespace", meta.namespace_name);
  FieldUnlessEmpty(out, "labels", meta.labels);
  FieldUnlessEmpty(out, "annotations", meta.annotations);
  out << YAML::EndMap;
}

void Emit(YAML::Emitter& out, const EnvVar& env) {
  out << YAML::BeginMap;
  Field(out, "name", env.name);
  if (const auto* value = std::get_if<std::string>(&env.value)) {
    Field(out, "value", *value);
  } else {
    out << YAML::Key << "valueFrom" << YAML::Value << YAML::BeginMap;
    if (const auto* secret = std::get_if<SecretKeySelector>(&env.value)) {
      out << YAML::Key << "secretKeyRef" << YAML::Value << YAML::BeginMap;
      Field(out, "name", secret->name);
      Field(out, "key", secret->key);
    } else {
      out << YAML::Key << "fieldRef" << YAML::Value << YAML::BeginMap;
      Field(out, "fieldPath", std::get<ObjectFieldSelector>(env.value).field_path);
    }
    out << YAML::EndMap << YAML::EndMap;
  }
  out << YAML::EndMap;
}

void Emit(YAML::Emitter& out, const ContainerPort& port) {
  out << YAML::BeginMap;
  Field(out, "name", port.name);
  Field(out, "containerPort", port.container_port);
  Field(out, "protocol", port.protocol);
  out << YAML::EndMap;
}

void Emit(YAML::Emitter& out, const VolumeMount& mount) {
  out << YAML::BeginMap;
  Field(out, "name", mount.name);
  Field(out, "mountPath", mount.mount_path);
  if (mount.read_only) Field(out, "readOnly", true);
  out << YAML::EndMap;
}

void Emit(YAML::Emitter& out, const Probe& probe) {
  out << YAML::BeginMap;
  if (const auto* grpc = std::get_if<GrpcAction>(&probe.action)) {
    out << YAML::Key << "grpc" << YAML::Value << YAML::BeginMap;
    Field(out, "port", grpc->port);
    Field(out, "service", grpc->service);
  } else {
    out << YAML::Key << "exec" << YAML::Value << YAML::BeginMap;
    Field(out, "command", std::get<ExecAction>(probe.action).command);
  }
  out << YAML::EndMap;
  Field(out, "initialDelaySeconds", probe.initial_delay_seconds);
  Field(out, "periodSeconds", probe.period_seconds);
  Field(out, "timeoutSeconds", probe.timeout_seconds);
  Field(out, "failureThreshold", probe.failure_threshold);
  out << YAML::EndMap;
}

void Emit(YAML::Emitter& out, const ResourceRequirements& resources) {
  out << YAML::BeginMap;
  Field(out, "requests", resources.requests);
  FieldUnlessEmpty(out, "limits", resources.limits);
  out << YAML::EndMap;
}

void Emit(YAML::Emitter& out, const Container& container) {
  out << YAML::BeginMap;
  Field(out, "name", container.name);
  Field(out, "image", container.image);
  FieldUnlessEmpty(out, "imagePullPolicy", container.image_pull_policy);
  FieldUnlessEmpty(out, "workingDir", container.working_dir);
  FieldUnlessEmpty(out, "command", container.command);
  FieldUnlessEmpty(out, "args", container.args);
  FieldUnlessEmpty(out, "env", container.env);
  FieldUnlessEmpty(out, "ports", container.ports);
  FieldIfSet(out, "resources", container.resources);
  FieldIfSet(out, "livenessProbe", container.liveness_probe);
  FieldIfSet(out, "readinessProbe", container.readiness_probe);
  FieldUnlessEmpty(out, "volumeMounts", container.volume_mounts);
  out << YAML::EndMap;
}

void Emit(YAML::Emitter& out, const KeyToPath& item) {
  out << YAML::BeginMap;
  Field(out, "key", item.key);
  Field(out, "path", item.path);
  out << YAML::EndMap;
}

// A volume's source: its key, then its fields.
void EmitVolumeSource(YAML::Emitter& out, const ConfigMapVolumeSource& source) {
  out << YAML::Key << "configMap" << YAML::Value << YAML::BeginMap;
  Field(out, "name", source.name);
  FieldUnlessEmpty(out, "items", source.items);
  out << YAML::EndMap;
}

void EmitVolumeSource(YAML::Emitter& out, const EmptyDirVolumeSource&) {
  out << YAML::Key << "emptyDir" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::EndMap;
}

void EmitVolumeSource(YAML::Emitter& out, const PersistentVolumeClaimVolumeSource& source) {
  out << YAML::Key << "persistentVolumeClaim" << YAML::Value << YAML::BeginMap;
  Field(out, "claimName", source.claim_name);
  out << YAML::EndMap;
}

void EmitVolumeSource(YAML::Emitter& out, const SecretVolumeSource& source) {
  out << YAML::Key << "secret" << YAML::Value << YAML::BeginMap;
  Field(out, "secretName", source.secret_name);
  Field(out, "defaultMode", source.default_mode);
  out << YAML::EndMap;
}

void Emit(YAML::Emitter& out, const Volume& volume) {
  out << YAML::BeginMap;
  Field(out, "name", volume.name);
  std::visit([&out](const auto& source) { EmitVolumeSource(out, source); }, volume.source);
  out << YAML::EndMap;
}

void Emit(YAML::Emitter& out, const PodSecurityContext& context) {
  out << YAML::BeginMap;
  Field(out, "fsGroup", context.fs_group);
  FieldUnlessEmpty(out, "fsGroupChangePolicy", context.fs_group_change_policy);
  out << YAML::EndMap;
}

void Emit(YAML::Emitter& out, const PodSpec& pod) {
  out << YAML::BeginMap;
  FieldUnlessEmpty(out, "restartPolicy", pod.restart_policy);
  Field(out, "enableServiceLinks", pod.enable_service_links);
  Field(out, "automountServiceAccountToken", pod.automount_service_account_token);
  FieldUnlessEmpty(out, "serviceAccountName", pod.service_account_name);
  FieldUnlessEmpty(out, "nodeSelector", pod.node_selector);
  FieldIfSet(out, "securityContext", pod.security_context);
  Field(out, "containers", pod.containers);
  FieldUnlessEmpty(out, "volumes", pod.volumes);
  out << YAML::EndMap;
}

void Emit(YAML::Emitter& out, const PodTemplateSpec& pod_template) {
  out << YAML::BeginMap;
  Field(out, "metadata", pod_template.metadata);
  Field(out, "spec", pod_template.spec);
  out << YAML::EndMap;
}

void Emit(YAML::Emitter& out, const PersistentVolumeClaim& claim) {
  out << YAML::BeginMap;
  Field(out, "metadata", claim.metadata);
  out << YAML::Key << "spec" << YAML::Value << YAML::BeginMap;
  Field(out, "accessModes", claim.spec.access_modes);
  Field(out, "resources", claim.spec.resources);
  out << YAML::EndMap << YAML::EndMap;
}

void Emit(YAML::Emitter& out, const ServicePort& port) {
  out << YAML::BeginMap;
  Field(out, "name", port.name);
  Field(out, "port", port.port);
  Field(out, "targetPort", port.target_port);
  Field(out, "protocol", port.protocol);
  out << YAML::EndMap;
}

void Emit(YAML::Emitter& out, const PodFailurePolicyRule& rule) {
  out << YAML::BeginMap;
  Field(out, "action", rule.action);
  if (rule.on_exit_codes) {
    out << YAML::Key << "onExitCodes" << YAML::Value << YAML::BeginMap;
    Field(out, "containerName", rule.on_exit_codes->container_name);
    Field(out, "operator", rule.on_exit_codes->op);
    Field(out, "values", rule.on_exit_codes->values);
    out << YAML::EndMap;
  }
  if (!rule.on_pod_conditions.empty()) {
    out << YAML::Key << "onPodConditions" << YAML::Value << YAML::BeginSeq;
    for (const PodFailurePolicyOnPodCondition& condition : rule.on_pod_conditions) {
      out << YAML::BeginMap;
      Field(out, "type", condition.type);
      Field(out, "status", condition.status);
      out << YAML::EndMap;
    }
    out << YAML::EndSeq;
  }
  out << YAML::EndMap;
}

// The top of every object: its apiVersion, its kind and its metadata; the caller writes the
// rest and ends the map.
void BeginObject(YAML::Emitter& out, const char* api_version, const Object& object) {
  out << YAML::BeginMap;
  Field(out, "apiVersion", api_version);
  Field(out, "kind", ObjectKind(object));
  std::visit([&out](const auto& o) { Field(out, "metadata", o.metadata); }, object);
}

void EmitSpec(YAML::Emitter& out, const Service::Spec& spec) {
  out << YAML::BeginMap;
  FieldUnlessEmpty(out, "clusterIP", spec.cluster_ip);
  Field(out, "publishNotReadyAddresses", spec.publish_not_ready_addresses);
  Field(out, "selector", spec.selector);
  Field(out, "ports", spec.ports);
  out << YAML::EndMap;
}

void EmitSpec(YAML::Emitter& out, const StatefulSet::Spec& spec) {
  out << YAML::BeginMap;
  Field(out, "serviceName", spec.service_name);
  Field(out, "replicas", spec.replicas);
  FieldUnlessEmpty(out, "podManagementPolicy", spec.pod_management_policy);
  if (!spec.update_strategy_type.empty()) {
    out << YAML::Key << "updateStrategy" << YAML::Value << YAML::BeginMap;
    Field(out, "type", spec.update_strategy_type);
    out << YAML::EndMap;
  }
  out << YAML::Key << "selector" << YAML::Value << YAML::BeginMap;
  Field(out, "matchLabels", spec.selector.match_labels);
  out << YAML::EndMap;
  Field(out, "template", spec.pod_template);
  FieldUnlessEmpty(out, "volumeClaimTemplates", spec.volume_claim_templates);
  out << YAML::EndMap;
}

void EmitSpec(YAML::Emitter& out, const Job::Spec& spec) {
  out << YAML::BeginMap;
  FieldUnlessEmpty(out, "completionMode", spec.completion_mode);
  Field(out, "completions", spec.completions);
  Field(out, "parallelism", spec.parallelism);
  Field(out, "backoffLimit", spec.backoff_limit);
  if (!spec.pod_failure_policy.empty()) {
    out << YAML::Key << "podFailurePolicy" << YAML::Value << YAML::BeginMap;
    Field(out, "rules", spec.pod_failure_policy);
    out << YAML::EndMap;
  }
  Field(out, "template", spec.pod_template);
  out << YAML::EndMap;
}

void EmitObject(YAML::Emitter& out, const ConfigMap& map) {
  BeginObject(out, "v1", map);
  Field(out, "data", map.data);
}

void EmitObject(YAML::Emitter& out, const Secret& secret) {
  BeginObject(out, "v1", secret);
  FieldUnlessEmpty(out, "type", secret.type);
  Field(out, "stringData", secret.string_data);
}

void EmitObject(YAML::Emitter& out, const Service& service) {
  BeginObject(out, "v1", service);
  out << YAML::Key << "spec" << YAML::Value;
  EmitSpec(out, service.spec);
}

void EmitObject(YAML::Emitter& out, const StatefulSet& set) {
  BeginObject(out, "apps/v1", set);
  out << YAML::Key << "spec" << YAML::Value;
  EmitSpec(out, set.spec);
}

void EmitObject(YAML::Emitter& out, const Job& job) {
  BeginObject(out, "batch/v1", job);
  out << YAML::Key << "spec" << YAML::Value;
  EmitSpec(out, job.spec);
}

}  // namespace

const char* ObjectKind(const Object& object) {
  struct Kind {
    const char* operator()(const ConfigMap&) const { return "ConfigMap"; }
    const char* operator()(const Secret&) const { return "Secret"; }
    const char* operator()(const Service&) const { return "Service"; }
    const char* operator()(const StatefulSet&) const { return "StatefulSet"; }
    const char* operator()(const Job&) const { return "Job"; }
  };
  return std::visit(Kind{}, object);
}

const std::string& ObjectName(const Object& object) {
  return std::visit([](const auto& o) -> const std::string& { return o.metadata.name; }, object);
}

std::string K8sObjectYaml(const Object& object) {
  YAML::Emitter out;
  std::visit(
      [&out](const auto& o) {
        EmitObject(out, o);
        out << YAML::EndMap;
      },
      object);
  return std::string(out.c_str()) + "\n";
}

}  // namespace ecps::k8s
