// Shared by the `ecps k8s` tests: an example job, and the manifests it makes parsed back, with
// lookups into them.
#ifndef ECPS_CLI_K8S_TEST_UTIL_H_
#define ECPS_CLI_K8S_TEST_UTIL_H_

#include <map>
#include <string>
#include <vector>

#include "cli/k8s_manifests.h"
#include "gtest/gtest.h"
#include "runtime/security.h"
#include "runtime/spec.h"
#include "yaml-cpp/yaml.h"

namespace ecps::k8s_test {

inline JobSpec Spec(const std::string& yaml) {
  auto spec = ParseSpec(yaml, "test.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : JobSpec();
}

// An erasure-coded job with everything `ecps k8s` wires: spares, two workers, a claim.
inline constexpr char kJob[] = R"(
job: {name: ctr}
cluster: {servers: 5, spares: 1, workers: 2}
fault_tolerance: {mode: erasure_code, k: 4, r: 1}
k8s:
  namespace: ml
  image: registry.example.org/ecps:1.0
  checkpoint_claim: ctr-checkpoints
  server_cpu: "3"
  server_memory: 6Gi
  node_selector: [kubernetes.io/arch=amd64, pool=train]
)";

inline constexpr char kToken[] = "0123456789abcdef0123456789abcdef";

// What a lookup that finds nothing gives: false as a condition (a default Node is a null
// that counts as present).
inline YAML::Node Missing() { return YAML::Node(YAML::NodeType::Undefined); }

// The generated objects, parsed back, by kind/name.
class Objects {
 public:
  explicit Objects(const std::vector<K8sManifest>& manifests) {
    for (const K8sManifest& m : manifests) {
      files_.push_back(m.file);
      YAML::Node node = YAML::Load(m.yaml);
      EXPECT_EQ(node["kind"].as<std::string>(), m.kind) << m.file;
      EXPECT_EQ(node["metadata"]["name"].as<std::string>(), m.name) << m.file;
      objects_[m.kind + "/" + m.name] = node;
    }
  }
  YAML::Node Get(const std::string& kind_name) const {
    auto it = objects_.find(kind_name);
    EXPECT_NE(it, objects_.end()) << "no " << kind_name;
    return it == objects_.end() ? Missing() : it->second;
  }
  bool Has(const std::string& kind_name) const { return objects_.count(kind_name) > 0; }
  const std::vector<std::string>& files() const { return files_; }

 private:
  std::vector<std::string> files_;
  std::map<std::string, YAML::Node> objects_;
};

inline Objects Generate(const JobSpec& spec, const std::string& token = kToken,
                        const std::vector<TlsIdentity>& tls = {}) {
  auto manifests = K8sManifests(spec, token, tls, "test.yaml");
  EXPECT_TRUE(manifests.ok()) << manifests.status();
  return Objects(manifests.ok() ? *manifests : std::vector<K8sManifest>());
}

inline YAML::Node PodSpecOf(const YAML::Node& workload) {
  return workload["spec"]["template"]["spec"];
}
inline YAML::Node ContainerOf(const YAML::Node& workload) {
  return PodSpecOf(workload)["containers"][0];
}

inline std::vector<std::string> Strings(const YAML::Node& list) {
  std::vector<std::string> out;
  for (const auto& item : list) out.push_back(item.as<std::string>());
  return out;
}

inline YAML::Node EnvOf(const YAML::Node& container, const std::string& name) {
  for (const auto& env : container["env"]) {
    if (env["name"].as<std::string>() == name) return env;
  }
  ADD_FAILURE() << "no env " << name;
  return Missing();
}

inline YAML::Node PortNamed(const YAML::Node& container, const std::string& name) {
  for (const auto& port : container["ports"]) {
    if (port["name"].as<std::string>() == name) return port;
  }
  return Missing();
}

// Every label of `selector` is on `labels` with the same value.
inline bool Selects(const YAML::Node& selector, const YAML::Node& labels) {
  if (!selector.IsMap() || selector.size() == 0) return false;
  for (const auto& kv : selector) {
    const YAML::Node value = labels[kv.first.as<std::string>()];
    if (!value || value.as<std::string>() != kv.second.as<std::string>()) return false;
  }
  return true;
}

// The spec every pod reads, from the ConfigMap.
inline JobSpec PodSpecFrom(const Objects& objects) {
  const YAML::Node map = objects.Get("ConfigMap/ctr-spec");
  auto spec = ParseSpec(map["data"]["spec.yaml"].as<std::string>(), "configmap");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : JobSpec();
}

}  // namespace ecps::k8s_test

#endif  // ECPS_CLI_K8S_TEST_UTIL_H_
