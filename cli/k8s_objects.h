// The Kubernetes objects `ecps k8s` writes, as plain structs: only the fields ecps sets, named
// after the Kubernetes API's (core/v1, apps/v1, batch/v1) so that a member reads as the key it
// becomes (`image_pull_policy`: imagePullPolicy). The builders fill them (cli/k8s_workloads.h);
// K8sObjectYaml (cli/k8s_yaml.h) writes them, and nothing else writes YAML.
//
// What is written: a field left empty (a string, a list, a map) or unset (an optional) is left
// out, so that Kubernetes applies its default; numbers and booleans are always written. The
// few fields written also when empty say so. Every member has an initializer, so that a
// builder's designated initializer (Container{.name = "worker", ...}) may leave any out.
#ifndef ECPS_CLI_K8S_OBJECTS_H_
#define ECPS_CLI_K8S_OBJECTS_H_

#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace ecps::k8s {

// A map[string]string of the API (labels, data, quantities), in the order it is written.
using StringMap = std::vector<std::pair<std::string, std::string>>;

struct ObjectMeta {
  std::string name{};  // a template's has none
  std::string namespace_name{};
  StringMap labels{};
  StringMap annotations{};
};

// A key of a Secret (env valueFrom.secretKeyRef).
struct SecretKeySelector {
  std::string name{};
  std::string key{};
};

// A field of the pod's own object (env valueFrom.fieldRef), e.g. metadata.name.
struct ObjectFieldSelector {
  std::string field_path{};
};

struct EnvVar {
  std::string name{};
  // `value` (written also when empty), or valueFrom a Secret's key or a field of the pod.
  std::variant<std::string, SecretKeySelector, ObjectFieldSelector> value{};
};

struct ContainerPort {
  std::string name{};
  int container_port = 0;
  std::string protocol = "TCP";
};

struct VolumeMount {
  std::string name{};
  std::string mount_path{};
  bool read_only = false;  // written only when true
};

// Kubernetes' gRPC probe: grpc.health.v1.Health/Check on `port` about `service` ("": the
// server as a whole, written also when empty).
struct GrpcAction {
  int port = 0;
  std::string service{};
};

// A command run in the container; exit code 0 is success.
struct ExecAction {
  std::vector<std::string> command{};
};

struct Probe {
  std::variant<GrpcAction, ExecAction> action{};
  int initial_delay_seconds = 0;
  int period_seconds = 10;
  int timeout_seconds = 1;
  int failure_threshold = 3;
};

// Quantities as Kubernetes writes them ("500m", "6Gi", "2"). `requests` is written also when
// empty (a GPU worker with no CPU or memory of its own asks for none); `limits` is not.
struct ResourceRequirements {
  StringMap requests{};
  StringMap limits{};
};

struct Container {
  std::string name{};
  std::string image{};
  std::string image_pull_policy{};
  std::string working_dir{};
  std::vector<std::string> command{};
  std::vector<std::string> args{};
  std::vector<EnvVar> env{};
  std::vector<ContainerPort> ports{};
  std::optional<ResourceRequirements> resources{};
  std::optional<Probe> liveness_probe{};
  std::optional<Probe> readiness_probe{};
  std::vector<VolumeMount> volume_mounts{};
};

struct KeyToPath {
  std::string key{};
  std::string path{};
};

struct ConfigMapVolumeSource {
  std::string name{};
  std::vector<KeyToPath> items{};
};

// A folder of the pod's own, empty at its start (written as emptyDir: {}).
struct EmptyDirVolumeSource {};

struct PersistentVolumeClaimVolumeSource {
  std::string claim_name{};
};

struct SecretVolumeSource {
  std::string secret_name{};
  int default_mode = 0644;  // the files' mode (written as a decimal number)
};

struct Volume {
  std::string name{};
  std::variant<ConfigMapVolumeSource, EmptyDirVolumeSource, PersistentVolumeClaimVolumeSource,
               SecretVolumeSource>
      source{};
};

struct PodSecurityContext {
  int fs_group = 0;
  std::string fs_group_change_policy{};
};

struct PodSpec {
  std::string restart_policy{};
  bool enable_service_links = true;
  bool automount_service_account_token = true;
  std::string service_account_name{};
  StringMap node_selector{};
  std::optional<PodSecurityContext> security_context{};
  std::vector<Container> containers{};
  std::vector<Volume> volumes{};
};

struct PodTemplateSpec {
  ObjectMeta metadata{};
  PodSpec spec{};
};

struct LabelSelector {
  StringMap match_labels{};
};

// A StatefulSet's volumeClaimTemplates entry.
struct PersistentVolumeClaim {
  struct Spec {
    std::vector<std::string> access_modes{};
    ResourceRequirements resources{};
  };
  ObjectMeta metadata{};
  Spec spec{};
};

struct ConfigMap {
  ObjectMeta metadata{};
  StringMap data{};
};

struct Secret {
  ObjectMeta metadata{};
  std::string type{};
  StringMap string_data{};
};

struct ServicePort {
  std::string name{};
  int port = 0;
  std::string target_port{};  // a container port's name
  std::string protocol = "TCP";
};

struct Service {
  struct Spec {
    std::string cluster_ip{};  // "None": headless; empty: Kubernetes assigns one
    bool publish_not_ready_addresses = false;
    StringMap selector{};
    std::vector<ServicePort> ports{};
  };
  ObjectMeta metadata{};
  Spec spec{};
};

struct StatefulSet {
  struct Spec {
    std::string service_name{};
    int replicas = 1;
    std::string pod_management_policy{};  // empty: Kubernetes' OrderedReady
    std::string update_strategy_type{};   // updateStrategy.type
    LabelSelector selector{};
    PodTemplateSpec pod_template{};  // template
    std::vector<PersistentVolumeClaim> volume_claim_templates{};
  };
  ObjectMeta metadata{};
  Spec spec{};
};

// A rule of a Job's podFailurePolicy: `action` when a container exits with one of `values`
// (on_exit_codes), or when the pod has one of `on_pod_conditions`.
struct PodFailurePolicyOnExitCodes {
  std::string container_name{};
  std::string op{};  // operator: In or NotIn
  std::vector<int> values{};
};

struct PodFailurePolicyOnPodCondition {
  std::string type{};
  std::string status{};
};

struct PodFailurePolicyRule {
  std::string action{};
  std::optional<PodFailurePolicyOnExitCodes> on_exit_codes{};
  std::vector<PodFailurePolicyOnPodCondition> on_pod_conditions{};
};

struct Job {
  struct Spec {
    std::string completion_mode{};
    int completions = 1;
    int parallelism = 1;
    int backoff_limit = 6;
    std::vector<PodFailurePolicyRule> pod_failure_policy{};  // podFailurePolicy.rules
    PodTemplateSpec pod_template{};                          // template
  };
  ObjectMeta metadata{};
  Spec spec{};
};

// One manifest: one of the kinds ecps writes.
using Object = std::variant<ConfigMap, Secret, Service, StatefulSet, Job>;

}  // namespace ecps::k8s

#endif  // ECPS_CLI_K8S_OBJECTS_H_
