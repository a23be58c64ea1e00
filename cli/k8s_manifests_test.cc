#include "cli/k8s_manifests.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/security.h"
#include "yaml-cpp/yaml.h"

namespace ecps {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

JobSpec Spec(const std::string& yaml) {
  auto spec = ParseSpec(yaml, "test.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : JobSpec();
}

// An erasure-coded job with everything `ecps k8s` wires: spares, two workers, a claim.
constexpr char kJob[] = R"(
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

constexpr char kToken[] = "0123456789abcdef0123456789abcdef";

// What a lookup that finds nothing gives: false as a condition (a default Node is a null
// that counts as present).
YAML::Node Missing() { return YAML::Node(YAML::NodeType::Undefined); }

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

Objects Generate(const JobSpec& spec, const std::string& token = kToken,
                 const std::vector<TlsIdentity>& tls = {}) {
  auto manifests = K8sManifests(spec, token, tls, "test.yaml");
  EXPECT_TRUE(manifests.ok()) << manifests.status();
  return Objects(manifests.ok() ? *manifests : std::vector<K8sManifest>());
}

YAML::Node PodSpecOf(const YAML::Node& workload) { return workload["spec"]["template"]["spec"]; }
YAML::Node ContainerOf(const YAML::Node& workload) { return PodSpecOf(workload)["containers"][0]; }

std::vector<std::string> Strings(const YAML::Node& list) {
  std::vector<std::string> out;
  for (const auto& item : list) out.push_back(item.as<std::string>());
  return out;
}

YAML::Node EnvOf(const YAML::Node& container, const std::string& name) {
  for (const auto& env : container["env"]) {
    if (env["name"].as<std::string>() == name) return env;
  }
  ADD_FAILURE() << "no env " << name;
  return Missing();
}

YAML::Node PortNamed(const YAML::Node& container, const std::string& name) {
  for (const auto& port : container["ports"]) {
    if (port["name"].as<std::string>() == name) return port;
  }
  return Missing();
}

// Every label of `selector` is on `labels` with the same value.
bool Selects(const YAML::Node& selector, const YAML::Node& labels) {
  if (!selector.IsMap() || selector.size() == 0) return false;
  for (const auto& kv : selector) {
    const YAML::Node value = labels[kv.first.as<std::string>()];
    if (!value || value.as<std::string>() != kv.second.as<std::string>()) return false;
  }
  return true;
}

// The spec every pod reads, from the ConfigMap.
JobSpec PodSpecFrom(const Objects& objects) {
  const YAML::Node map = objects.Get("ConfigMap/ctr-spec");
  auto spec = ParseSpec(map["data"]["spec.yaml"].as<std::string>(), "configmap");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : JobSpec();
}

TEST(K8sManifestsTest, OneFilePerObjectInTheOrderToApplyThem) {
  Objects objects = Generate(Spec(kJob));
  EXPECT_THAT(
      objects.files(),
      ElementsAre("00-spec.configmap.yaml", "01-token.secret.yaml", "10-coordinator.service.yaml",
                  "11-coordinator.statefulset.yaml", "20-server.service.yaml",
                  "21-server.statefulset.yaml", "22-spare.statefulset.yaml", "30-worker.job.yaml"));
  for (const char* object :
       {"StatefulSet/ctr-coordinator", "Service/ctr-coordinator", "StatefulSet/ctr-server",
        "Service/ctr-server", "StatefulSet/ctr-spare", "Job/ctr-worker", "Secret/ctr-token"}) {
    EXPECT_EQ(objects.Get(object)["metadata"]["namespace"].as<std::string>(), "ml") << object;
  }
  // Without spares there is no spare StatefulSet.
  JobSpec no_spares = Spec(kJob);
  no_spares.cluster.spares = 0;
  EXPECT_FALSE(Generate(no_spares).Has("StatefulSet/ctr-spare"));
}

TEST(K8sManifestsTest, TheSpecInThePodsPointsAtTheServiceAndHoldsNoToken) {
  JobSpec spec = Spec(kJob);
  spec.job.token = "s3cret-job-token";
  auto manifests = K8sManifests(spec, spec.job.token, {}, "test.yaml");
  ASSERT_TRUE(manifests.ok()) << manifests.status();
  Objects objects(*manifests);
  const JobSpec pod = PodSpecFrom(objects);
  EXPECT_EQ(pod.cluster.coordinator, "ctr-coordinator.ml.svc:7070");
  EXPECT_EQ(pod.cluster.coordinator_port, kK8sCoordinatorPort);
  EXPECT_EQ(pod.cluster.host, "0.0.0.0");
  EXPECT_EQ(pod.monitoring.metrics_port, kK8sMetricsPort);
  EXPECT_EQ(pod.fault_tolerance.checkpoint.dir, "/srv/ecps/runs/ctr/checkpoints");
  EXPECT_TRUE(pod.job.token.empty());
  EXPECT_EQ(pod.cluster.servers, 5);
  // The token is in the Secret and nowhere else.
  const YAML::Node secret = objects.Get("Secret/ctr-token")["stringData"];
  EXPECT_EQ(secret["token"].as<std::string>(), "s3cret-job-token");
  EXPECT_EQ(secret["worker-token"].as<std::string>(),
            RoleToken("s3cret-job-token", Role::kWorker));
  EXPECT_EQ(secret["admin-token"].as<std::string>(),
            RoleToken("s3cret-job-token", Role::kAdmin));
  for (const K8sManifest& m : *manifests) {
    if (m.kind != "Secret") {
      EXPECT_THAT(m.yaml, Not(HasSubstr("s3cret-job-token"))) << m.file;
    }
  }
}

TEST(K8sManifestsTest, EveryRoleGetsTheTokenTheSpecAndTheCoordinator) {
  Objects objects = Generate(Spec(kJob));
  const std::string coordinator = PodSpecFrom(objects).cluster.coordinator;
  for (const char* workload : {"StatefulSet/ctr-coordinator", "StatefulSet/ctr-server",
                               "StatefulSet/ctr-spare", "Job/ctr-worker"}) {
    SCOPED_TRACE(workload);
    const YAML::Node w = objects.Get(workload);
    const YAML::Node c = ContainerOf(w);
    EXPECT_EQ(c["image"].as<std::string>(), "registry.example.org/ecps:1.0");
    const YAML::Node token = EnvOf(c, "ECPS_TOKEN")["valueFrom"]["secretKeyRef"];
    EXPECT_EQ(token["name"].as<std::string>(), "ctr-token");
    // The workers get their role token only; the others the secret (docs/security.md).
    EXPECT_EQ(token["key"].as<std::string>(),
              std::string(workload) == "Job/ctr-worker" ? "worker-token" : "token");
    if (std::string(workload) != "StatefulSet/ctr-coordinator") {
      EXPECT_EQ(EnvOf(c, "ECPS_COORDINATOR")["value"].as<std::string>(), coordinator);
    }
    // The spec: the ConfigMap's key, mounted where the flags say.
    std::string flags = absl::StrCat(absl::StrJoin(Strings(c["command"]), " "), " ",
                                     c["args"] ? absl::StrJoin(Strings(c["args"]), " ") : "");
    EXPECT_THAT(flags, HasSubstr("--spec /etc/ecps/spec.yaml"));
    bool spec_volume = false;
    for (const auto& v : PodSpecOf(w)["volumes"]) {
      if (v["name"].as<std::string>() != "spec") continue;
      spec_volume = v["configMap"]["name"].as<std::string>() == "ctr-spec" &&
                    v["configMap"]["items"][0]["key"].as<std::string>() == "spec.yaml" &&
                    v["configMap"]["items"][0]["path"].as<std::string>() == "spec.yaml";
    }
    EXPECT_TRUE(spec_volume);
    EXPECT_EQ(c["volumeMounts"][0]["name"].as<std::string>(), "spec");
    EXPECT_EQ(c["volumeMounts"][0]["mountPath"].as<std::string>(), "/etc/ecps");
    EXPECT_EQ(PodSpecOf(w)["nodeSelector"]["kubernetes.io/arch"].as<std::string>(), "amd64");
    EXPECT_EQ(PodSpecOf(w)["nodeSelector"]["pool"].as<std::string>(), "train");
  }
}

TEST(K8sManifestsTest, ServicesSelectTheirRolesOnTheirPorts) {
  Objects objects = Generate(Spec(kJob));
  const YAML::Node coordinator = objects.Get("StatefulSet/ctr-coordinator");
  const YAML::Node coordinator_service = objects.Get("Service/ctr-coordinator");
  EXPECT_TRUE(Selects(coordinator_service["spec"]["selector"],
                      coordinator["spec"]["template"]["metadata"]["labels"]));
  EXPECT_EQ(coordinator_service["spec"]["ports"][0]["port"].as<int>(), 7070);
  EXPECT_EQ(coordinator_service["spec"]["ports"][0]["targetPort"].as<std::string>(), "grpc");
  EXPECT_EQ(PortNamed(ContainerOf(coordinator), "grpc")["containerPort"].as<int>(), 7070);
  EXPECT_THAT(Strings(ContainerOf(coordinator)["args"]),
              testing::IsSupersetOf({"coordinator", "--port", "7070", "--host", "0.0.0.0"}));
  EXPECT_TRUE(coordinator_service["spec"]["publishNotReadyAddresses"].as<bool>());
  // Not headless: the roles dial the Service's stable address, whichever pod is behind it.
  EXPECT_FALSE(coordinator_service["spec"]["clusterIP"]);
  EXPECT_EQ(coordinator["spec"]["serviceName"].as<std::string>(), "ctr-coordinator");
  EXPECT_TRUE(Selects(coordinator["spec"]["selector"]["matchLabels"],
                      coordinator["spec"]["template"]["metadata"]["labels"]));

  // The headless Service: stable DNS names for servers and spares, whose StatefulSets it
  // governs.
  const YAML::Node servers = objects.Get("Service/ctr-server");
  EXPECT_EQ(servers["spec"]["clusterIP"].as<std::string>(), "None");
  EXPECT_TRUE(servers["spec"]["publishNotReadyAddresses"].as<bool>());
  EXPECT_EQ(servers["spec"]["ports"][0]["port"].as<int>(), kK8sServerPort);
  for (const char* set : {"StatefulSet/ctr-server", "StatefulSet/ctr-spare"}) {
    const YAML::Node s = objects.Get(set);
    EXPECT_EQ(s["spec"]["serviceName"].as<std::string>(), "ctr-server") << set;
    EXPECT_TRUE(Selects(servers["spec"]["selector"], s["spec"]["template"]["metadata"]["labels"]))
        << set;
    EXPECT_TRUE(Selects(s["spec"]["selector"]["matchLabels"],
                        s["spec"]["template"]["metadata"]["labels"]))
        << set;
    EXPECT_EQ(s["spec"]["podManagementPolicy"].as<std::string>(), "Parallel") << set;
    EXPECT_EQ(PortNamed(ContainerOf(s), "grpc")["containerPort"].as<int>(), kK8sServerPort);
  }
  // Each StatefulSet selects only its own pods.
  EXPECT_FALSE(Selects(objects.Get("StatefulSet/ctr-server")["spec"]["selector"]["matchLabels"],
                       objects.Get("StatefulSet/ctr-spare")["spec"]["template"]["metadata"]
                                  ["labels"]));
  EXPECT_EQ(objects.Get("StatefulSet/ctr-server")["spec"]["replicas"].as<int>(), 5);
  EXPECT_EQ(objects.Get("StatefulSet/ctr-spare")["spec"]["replicas"].as<int>(), 1);
}

// The coordinator is started again when it dies (docs/recovery.md): one pod at most, restarted
// always, with a claim of its own for its state log that outlives the pod, so the new one
// takes the job over; after the job ended it serves the end instead of exiting into a restart.
TEST(K8sManifestsTest, TheCoordinatorIsRestartedOnItsStateClaim) {
  Objects objects = Generate(Spec(kJob));
  const YAML::Node set = objects.Get("StatefulSet/ctr-coordinator");
  EXPECT_EQ(set["spec"]["replicas"].as<int>(), 1);
  EXPECT_EQ(set["spec"]["updateStrategy"]["type"].as<std::string>(), "OnDelete");
  EXPECT_EQ(PodSpecOf(set)["restartPolicy"].as<std::string>(), "Always");
  const std::vector<std::string> args = Strings(ContainerOf(set)["args"]);
  auto flag = [&args](const std::string& name) {
    auto it = std::find(args.begin(), args.end(), name);
    return it == args.end() || it + 1 == args.end() ? std::string("(none)") : *(it + 1);
  };
  EXPECT_EQ(flag("--state-dir"), kK8sStateDir);
  EXPECT_EQ(flag("--linger-ms"), "-1");
  // The claim: from the template, mounted above the state folder (the log owns its folder,
  // and a new volume may hold lost+found), writable by the image's group.
  const YAML::Node claims = set["spec"]["volumeClaimTemplates"];
  ASSERT_EQ(claims.size(), 1u);
  const std::string claim = claims[0]["metadata"]["name"].as<std::string>();
  EXPECT_THAT(Strings(claims[0]["spec"]["accessModes"]), ElementsAre("ReadWriteOnce"));
  EXPECT_EQ(claims[0]["spec"]["resources"]["requests"]["storage"].as<std::string>(), "1Gi");
  EXPECT_FALSE(claims[0]["spec"]["storageClassName"]);
  std::string mount;
  for (const auto& m : ContainerOf(set)["volumeMounts"]) {
    if (m["name"].as<std::string>() == claim) mount = m["mountPath"].as<std::string>();
  }
  EXPECT_EQ(mount, kK8sStateMount);
  EXPECT_EQ(fs::path(kK8sStateDir).parent_path().string(), mount);
  for (const auto& v : PodSpecOf(set)["volumes"]) {
    EXPECT_NE(v["name"].as<std::string>(), claim) << "the template's claim, not a pod volume";
  }
  EXPECT_EQ(PodSpecOf(set)["securityContext"]["fsGroup"].as<int>(), 10001);
  // Also without a checkpoint claim or TLS.
  JobSpec bare = Spec(kJob);
  bare.k8s.checkpoint_claim.clear();
  bare.fault_tolerance.checkpoint.save_final = false;
  const YAML::Node bare_set = Generate(bare).Get("StatefulSet/ctr-coordinator");
  EXPECT_EQ(PodSpecOf(bare_set)["securityContext"]["fsGroup"].as<int>(), 10001);
  // No Job runs a coordinator any more.
  EXPECT_FALSE(objects.Has("Job/ctr-coordinator"));
}

TEST(K8sManifestsTest, PodOrdinalIsTheServerIdAndCompletionIndexTheWorkerId) {
  Objects objects = Generate(Spec(kJob));
  const YAML::Node server = ContainerOf(objects.Get("StatefulSet/ctr-server"));
  EXPECT_THAT(Strings(server["command"]), ElementsAre("sh", "-c", testing::_));
  const std::string script = server["command"][2].as<std::string>();
  EXPECT_THAT(script, HasSubstr("--id \"${POD_NAME##*-}\""));
  EXPECT_THAT(script, HasSubstr("--port 7071"));
  EXPECT_THAT(script, HasSubstr("--host 0.0.0.0"));
  // --advertise takes a host: the server appends its port (runtime/net.h, JoinHostPort).
  EXPECT_THAT(script, HasSubstr("--advertise $POD_NAME.ctr-server.ml.svc\""));
  EXPECT_EQ(EnvOf(server, "POD_NAME")["valueFrom"]["fieldRef"]["fieldPath"].as<std::string>(),
            "metadata.name");

  const YAML::Node spare = ContainerOf(objects.Get("StatefulSet/ctr-spare"));
  const std::vector<std::string> spare_args = Strings(spare["args"]);
  EXPECT_THAT(absl::StrJoin(spare_args, " "),
              HasSubstr("--id -1 --host 0.0.0.0 --port 7071 --advertise "
                        "$(POD_NAME).ctr-server.ml.svc"));
  EXPECT_EQ(EnvOf(spare, "POD_NAME")["valueFrom"]["fieldRef"]["fieldPath"].as<std::string>(),
            "metadata.name");

  const YAML::Node workers = objects.Get("Job/ctr-worker");
  EXPECT_EQ(workers["spec"]["completionMode"].as<std::string>(), "Indexed");
  EXPECT_EQ(workers["spec"]["completions"].as<int>(), 2);
  EXPECT_EQ(workers["spec"]["parallelism"].as<int>(), 2);
  EXPECT_EQ(PodSpecOf(workers)["restartPolicy"].as<std::string>(), "Never");
  const YAML::Node worker = ContainerOf(workers);
  EXPECT_THAT(absl::StrJoin(Strings(worker["args"]), " "),
              HasSubstr("worker --spec /etc/ecps/spec.yaml --id $(ECPS_WORKER_ID) --port 7072"));
  EXPECT_EQ(EnvOf(worker, "ECPS_WORKER_ID")["valueFrom"]["fieldRef"]["fieldPath"]
                .as<std::string>(),
            "metadata.annotations['batch.kubernetes.io/job-completion-index']");
}

// The server's wrapper run by sh against a stand-in ecps that logs its arguments.
class ServerScriptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = testing::TempDir() + "/k8s_script_XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    Objects objects = Generate(Spec(kJob));
    std::ofstream(dir_ / "server.sh")
        << ContainerOf(objects.Get("StatefulSet/ctr-server"))["command"][2].as<std::string>();
    // Exits with $FIRST_RC when asked for an id, 0 as a spare.
    std::ofstream(dir_ / "ecps") << "#!/bin/sh\necho \"$*\" >> \"$LOG\"\n"
                                    "case \"$*\" in *'--id -1'*) exit 0;; esac\n"
                                    "exit \"$FIRST_RC\"\n";
    fs::permissions(dir_ / "ecps", fs::perms::owner_all);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs the script as pod ctr-server-3; returns its exit code.
  int Run(int first_rc) {
    const std::string command = absl::StrCat(
        "cd '", dir_.string(), "' && PATH='", dir_.string(), "':/usr/bin:/bin POD_NAME=ctr-server-3",
        " LOG=calls FIRST_RC=", first_rc, " sh server.sh 2>/dev/null");
    const int status = std::system(command.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  std::vector<std::string> Calls() {
    std::ifstream in(dir_ / "calls");
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }

  fs::path dir_;
};

TEST_F(ServerScriptTest, AsksForItsOrdinal) {
  EXPECT_EQ(Run(0), 0);
  EXPECT_THAT(Calls(), ElementsAre("server --spec /etc/ecps/spec.yaml --host 0.0.0.0 --port 7071 "
                                   "--advertise ctr-server-3.ctr-server.ml.svc --id 3"));
}

TEST_F(ServerScriptTest, ServesOnAsASpareWhenItsIdIsRefused) {
  EXPECT_EQ(Run(1), 0);
  const std::vector<std::string> calls = Calls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_THAT(calls[0], testing::EndsWith("--id 3"));
  EXPECT_THAT(calls[1], testing::EndsWith("--advertise ctr-server-3.ctr-server.ml.svc --id -1"));
}

TEST(K8sManifestsTest, ProbesResourcesAndScrapeAnnotations) {
  Objects objects = Generate(Spec(kJob));
  const std::map<std::string, std::pair<int, std::string>> expected = {
      {"StatefulSet/ctr-coordinator", {7070, "ecps.v1.Coordinator"}},
      {"StatefulSet/ctr-server", {7071, "ecps.v1.ParameterServer"}},
      {"StatefulSet/ctr-spare", {7071, "ecps.v1.ParameterServer"}},
      {"Job/ctr-worker", {7072, ""}}};
  for (const auto& [workload, probe] : expected) {
    SCOPED_TRACE(workload);
    const YAML::Node w = objects.Get(workload);
    const YAML::Node c = ContainerOf(w);
    EXPECT_EQ(c["livenessProbe"]["grpc"]["port"].as<int>(), probe.first);
    EXPECT_EQ(c["livenessProbe"]["grpc"]["service"].as<std::string>(), "");
    EXPECT_GE(c["livenessProbe"]["failureThreshold"].as<int>() *
                  c["livenessProbe"]["periodSeconds"].as<int>(),
              60);  // a rebuilding server is not killed for a slow answer
    EXPECT_EQ(c["readinessProbe"]["grpc"]["port"].as<int>(), probe.first);
    EXPECT_EQ(c["readinessProbe"]["grpc"]["service"].as<std::string>(), probe.second);
    const YAML::Node annotations = w["spec"]["template"]["metadata"]["annotations"];
    EXPECT_EQ(annotations["prometheus.io/scrape"].as<std::string>(), "true");
    EXPECT_EQ(annotations["prometheus.io/port"].as<std::string>(), "9400");
    EXPECT_EQ(annotations["prometheus.io/path"].as<std::string>(), "/metrics");
    // Quoted: kubectl would read a plain 9400 or true as a number or a boolean, and an
    // annotation must be a string.
    EXPECT_EQ(annotations["prometheus.io/port"].Tag(), "!");
    EXPECT_EQ(annotations["prometheus.io/scrape"].Tag(), "!");
    EXPECT_EQ(PortNamed(c, "metrics")["containerPort"].as<int>(), 9400);
  }
  const YAML::Node server = ContainerOf(objects.Get("StatefulSet/ctr-server"));
  EXPECT_EQ(server["resources"]["requests"]["cpu"].as<std::string>(), "3");
  EXPECT_EQ(server["resources"]["requests"]["memory"].as<std::string>(), "6Gi");
  EXPECT_EQ(server["resources"]["limits"]["memory"].as<std::string>(), "6Gi");
  EXPECT_FALSE(server["resources"]["limits"]["cpu"]);  // no CPU limit: no throttled RPCs
  const YAML::Node coordinator = ContainerOf(objects.Get("StatefulSet/ctr-coordinator"));
  EXPECT_EQ(coordinator["resources"]["requests"]["cpu"].as<std::string>(), "500m");

  // monitoring.metrics_port -1: no metrics, no annotations.
  JobSpec quiet = Spec(kJob);
  quiet.monitoring.metrics_port = -1;
  Objects none = Generate(quiet);
  const YAML::Node w = none.Get("StatefulSet/ctr-server");
  EXPECT_FALSE(w["spec"]["template"]["metadata"]["annotations"]);
  EXPECT_FALSE(PortNamed(ContainerOf(w), "metrics"));
  // A port of its own is used as it is.
  JobSpec own = Spec(kJob);
  own.monitoring.metrics_port = 9100;
  EXPECT_EQ(Generate(own).Get("Job/ctr-worker")["spec"]["template"]["metadata"]["annotations"]
                                             ["prometheus.io/port"]
                .as<std::string>(),
            "9100");
}

// GPU workers ask the NVIDIA device plugin for their GPUs (a limit: Kubernetes takes device
// resources as limits); CPU workers and the servers ask for none.
TEST(K8sManifestsTest, GpuWorkersLimitTheirGpus) {
  if (!BuiltWithCuda()) GTEST_SKIP() << "built without CUDA: worker_device cuda is refused";
  std::string yaml = kJob;
  yaml.replace(yaml.find("workers: 2}"), 11,
               "workers: 2, worker_device: cuda, gpus_per_worker: 2}");
  Objects objects = Generate(Spec(yaml));
  const YAML::Node worker = ContainerOf(objects.Get("Job/ctr-worker"));
  EXPECT_EQ(worker["resources"]["limits"]["nvidia.com/gpu"].as<std::string>(), "2");
  const YAML::Node server = ContainerOf(objects.Get("StatefulSet/ctr-server"));
  EXPECT_FALSE(server["resources"]["limits"]["nvidia.com/gpu"]);
  Objects cpu = Generate(Spec(kJob));
  EXPECT_FALSE(ContainerOf(cpu.Get("Job/ctr-worker"))["resources"]["limits"]["nvidia.com/gpu"]);
}

TEST(K8sManifestsTest, TheCheckpointVolumeIsSharedByTheCoordinatorAndTheServers) {
  Objects objects = Generate(Spec(kJob));
  const std::string dir = PodSpecFrom(objects).fault_tolerance.checkpoint.dir;
  for (const char* workload : {"StatefulSet/ctr-coordinator", "StatefulSet/ctr-server",
                               "StatefulSet/ctr-spare", "Job/ctr-worker"}) {
    SCOPED_TRACE(workload);
    const YAML::Node pod = PodSpecOf(objects.Get(workload));
    std::string claim, mount;
    for (const auto& v : pod["volumes"]) {
      if (v["name"].as<std::string>() == "checkpoints") {
        claim = v["persistentVolumeClaim"]["claimName"].as<std::string>();
      }
    }
    for (const auto& m : pod["containers"][0]["volumeMounts"]) {
      if (m["name"].as<std::string>() == "checkpoints") mount = m["mountPath"].as<std::string>();
    }
    const bool worker = std::string(workload) == "Job/ctr-worker";
    EXPECT_EQ(claim, worker ? "" : "ctr-checkpoints");
    EXPECT_EQ(mount, worker ? "" : dir);
    if (!worker) {
      EXPECT_EQ(pod["securityContext"]["fsGroup"].as<int>(), 10001);
    }
  }
  // No claim and no checkpoint to write: an emptyDir, so the path exists and is writable.
  JobSpec bare = Spec(kJob);
  bare.k8s.checkpoint_claim.clear();
  bare.fault_tolerance.checkpoint.save_final = false;
  const YAML::Node pod = PodSpecOf(Generate(bare).Get("StatefulSet/ctr-server"));
  EXPECT_TRUE(pod["volumes"][1]["emptyDir"].IsMap());
  EXPECT_FALSE(pod["securityContext"]);
}

TEST(K8sManifestsTest, WhatCannotRunOnKubernetesIsRefusedNamingTheKey) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"job: {name: ctr}\nk8s: {checkpoint_claim: c}\n", "k8s.image: empty"},
      {"job: {name: Bench_1}\n", "job.name: "},
      {"job: {name: a-very-long-job-name-that-cannot-name-a-statefulset}\n", "at most 45"},
      {"cluster: {host: 127.0.0.1}\n", "cluster.host: 127.0.0.1"},
      {"cluster: {advertise: node-a}\n", "cluster.advertise"},
      {"cluster: {coordinator: \"c:1\"}\n", "cluster.coordinator"},
      {"cluster: {servers: 3}\nfault_tolerance: {mode: erasure_code, k: 2, r: 1}\n"
       "faults: [{at_step: 10, action: kill_server, target: 1}]\n",
       "faults[0]: kill_server drills are run by `ecps run`"},
      {"monitoring: {metrics_port: 7071}\n", "monitoring.metrics_port: 7071 is the servers'"},
      {"cluster: {coordinator_port: 9400}\n", "monitoring.metrics_port: 9400 is the coordinators'"},
  };
  for (const auto& [yaml, message] : cases) {
    JobSpec spec = Spec(yaml);
    if (!absl::StrContains(yaml, "k8s:")) {
      spec.k8s.image = "ecps:1";
      spec.k8s.checkpoint_claim = "c";
    }
    const absl::Status status = CheckK8sSpec(spec);
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << yaml;
    EXPECT_THAT(status.message(), HasSubstr(message)) << yaml;
    EXPECT_FALSE(K8sManifests(spec, kToken, {}, "t.yaml").ok()) << yaml;
  }
  // A checkpoint needs one volume for all: the servers write into files the coordinator
  // creates.
  JobSpec spec = Spec("k8s: {image: \"ecps:1\"}\n");
  EXPECT_THAT(CheckK8sSpec(spec).message(),
              HasSubstr("k8s.checkpoint_claim: empty, but "
                        "fault_tolerance.checkpoint.save_final is true"));
  spec = Spec("k8s: {image: \"ecps:1\"}\nfault_tolerance: {mode: checkpoint}\n"
              "cluster: {servers: 1}\n");
  EXPECT_THAT(CheckK8sSpec(spec).message(), HasSubstr("fault_tolerance.mode is checkpoint"));
  EXPECT_TRUE(CheckK8sSpec(Spec("k8s: {image: \"ecps:1\", checkpoint_claim: ck}\n")).ok());
  EXPECT_TRUE(CheckK8sSpec(Spec("k8s: {image: \"ecps:1\"}\n"
                                "fault_tolerance: {checkpoint: {save_final: false}}\n"))
                  .ok());
}

// A job with security.tls: the paths as the parser leaves them (absolute, on this machine).
JobSpec TlsSpec() {
  JobSpec spec = Spec(kJob);
  TlsSection& tls = spec.security.tls;
  tls.ca = "/home/op/certs/ca.pem";
  for (auto [pair, name] :
       {std::pair{&tls.coordinator, "coordinator"}, std::pair{&tls.server, "server"},
        std::pair{&tls.worker, "worker"}, std::pair{&tls.admin, "admin"}}) {
    *pair = TlsPair{absl::StrCat("/home/op/certs/", name, ".pem"),
                    absl::StrCat("/home/op/certs/", name, ".key")};
  }
  return spec;
}

// What LoadK8sTls would read for TlsSpec(), made up: the manifests only carry it.
std::vector<TlsIdentity> TlsIdentities() {
  std::vector<TlsIdentity> ids;
  for (Role role : {Role::kCoordinator, Role::kServer, Role::kWorker}) {
    const std::string name = RoleName(role);
    ids.push_back(TlsIdentity{role, "CA PEM\n", name + " CERT PEM\n", name + " KEY PEM\n"});
  }
  return ids;
}

TEST(K8sTlsTest, EachRolesPodsMountTheirOwnCertificateAndNoOther) {
  Objects objects = Generate(TlsSpec(), kToken, TlsIdentities());
  EXPECT_THAT(
      objects.files(),
      ElementsAre("00-spec.configmap.yaml", "01-token.secret.yaml",
                  "02-coordinator-tls.secret.yaml", "03-server-tls.secret.yaml",
                  "04-worker-tls.secret.yaml", "10-coordinator.service.yaml",
                  "11-coordinator.statefulset.yaml", "20-server.service.yaml",
                  "21-server.statefulset.yaml", "22-spare.statefulset.yaml", "30-worker.job.yaml"));
  for (const std::string role : {"coordinator", "server", "worker"}) {
    SCOPED_TRACE(role);
    const YAML::Node secret = objects.Get("Secret/ctr-" + role + "-tls");
    EXPECT_EQ(secret["type"].as<std::string>(), "kubernetes.io/tls");
    EXPECT_EQ(secret["metadata"]["namespace"].as<std::string>(), "ml");
    EXPECT_EQ(secret["stringData"]["tls.crt"].as<std::string>(), role + " CERT PEM\n");
    EXPECT_EQ(secret["stringData"]["tls.key"].as<std::string>(), role + " KEY PEM\n");
    EXPECT_EQ(secret["stringData"]["ca.crt"].as<std::string>(), "CA PEM\n");
  }
  // The admin's certificate stays with the operators.
  EXPECT_FALSE(objects.Has("Secret/ctr-admin-tls"));
  const std::map<std::string, std::string> secret_of = {
      {"StatefulSet/ctr-coordinator", "ctr-coordinator-tls"},
      {"StatefulSet/ctr-server", "ctr-server-tls"},
      {"StatefulSet/ctr-spare", "ctr-server-tls"},  // a spare becomes a server
      {"Job/ctr-worker", "ctr-worker-tls"}};
  for (const auto& [workload, secret] : secret_of) {
    SCOPED_TRACE(workload);
    const YAML::Node pod = PodSpecOf(objects.Get(workload));
    std::vector<std::string> secrets;
    for (const auto& v : pod["volumes"]) {
      if (!v["secret"]) continue;
      secrets.push_back(v["name"].as<std::string>() + ":" +
                        v["secret"]["secretName"].as<std::string>());
      EXPECT_EQ(v["secret"]["defaultMode"].as<int>(), 0440);
    }
    EXPECT_THAT(secrets, ElementsAre("tls:" + secret));
    // The files belong to the image's group, so its unprivileged user reads them.
    EXPECT_EQ(pod["securityContext"]["fsGroup"].as<int>(), 10001);
    std::string mount;
    for (const auto& m : pod["containers"][0]["volumeMounts"]) {
      if (m["name"].as<std::string>() != "tls") continue;
      mount = m["mountPath"].as<std::string>();
      EXPECT_TRUE(m["readOnly"].as<bool>());
    }
    EXPECT_EQ(mount, kK8sTlsDir);
  }
  // The job token still travels: a request must carry one of the job's (docs/security.md).
  EXPECT_EQ(objects.Get("Secret/ctr-token")["stringData"]["token"].as<std::string>(), kToken);
}

TEST(K8sTlsTest, TheSpecInThePodsNamesTheMountForEveryRole) {
  auto manifests = K8sManifests(TlsSpec(), kToken, TlsIdentities(), "test.yaml");
  ASSERT_TRUE(manifests.ok()) << manifests.status();
  Objects objects(*manifests);
  const std::string text = objects.Get("ConfigMap/ctr-spec")["data"]["spec.yaml"].as<std::string>();
  const YAML::Node tls = YAML::Load(text)["security"]["tls"];
  EXPECT_EQ(tls["ca"].as<std::string>(), kK8sTlsCa);
  for (const char* role : {"coordinator", "server", "worker"}) {
    EXPECT_EQ(tls[role]["cert"].as<std::string>(), kK8sTlsCert) << role;
    EXPECT_EQ(tls[role]["key"].as<std::string>(), kK8sTlsKey) << role;
  }
  EXPECT_TRUE(!tls["admin"] || !tls["admin"]["cert"] ||
              tls["admin"]["cert"].as<std::string>().empty());
  // No path of this machine, and the keys in their Secrets only.
  EXPECT_THAT(text, Not(HasSubstr("/home/op")));
  for (const K8sManifest& m : *manifests) {
    if (m.kind != "Secret") {
      EXPECT_THAT(m.yaml, Not(HasSubstr("KEY PEM"))) << m.file;
    }
  }
}

TEST(K8sTlsTest, ProbesRunEcpsHealthWithThePodsOwnCertificate) {
  Objects objects = Generate(TlsSpec(), kToken, TlsIdentities());
  struct Probe {
    std::string address, role, readiness;
  };
  const std::map<std::string, Probe> expected = {
      {"StatefulSet/ctr-coordinator", {"127.0.0.1:7070", "coordinator", "ecps.v1.Coordinator"}},
      {"StatefulSet/ctr-server", {"127.0.0.1:7071", "server", "ecps.v1.ParameterServer"}},
      {"StatefulSet/ctr-spare", {"127.0.0.1:7071", "server", "ecps.v1.ParameterServer"}},
      {"Job/ctr-worker", {"127.0.0.1:7072", "worker", ""}}};
  const std::string tls_flags =
      "--deadline-ms 4000 --tls-ca /etc/ecps-tls/ca.crt --tls-cert /etc/ecps-tls/tls.crt "
      "--tls-key /etc/ecps-tls/tls.key";
  for (const auto& [workload, probe] : expected) {
    SCOPED_TRACE(workload);
    const YAML::Node c = ContainerOf(objects.Get(workload));
    // Kubernetes' gRPC probe presents no client certificate: a TLS role would refuse it.
    EXPECT_FALSE(c["livenessProbe"]["grpc"]);
    EXPECT_FALSE(c["readinessProbe"]["grpc"]);
    const std::string health = "ecps health " + probe.address + " " + probe.role + " ";
    EXPECT_EQ(absl::StrJoin(Strings(c["livenessProbe"]["exec"]["command"]), " "),
              health + tls_flags);
    EXPECT_EQ(
        absl::StrJoin(Strings(c["readinessProbe"]["exec"]["command"]), " "),
        health + (probe.readiness.empty() ? "" : "--service " + probe.readiness + " ") + tls_flags);
    // ecps gives up and says why before the kubelet cuts it off.
    EXPECT_GT(c["livenessProbe"]["timeoutSeconds"].as<int>() * 1000, 4000);
    EXPECT_GT(c["readinessProbe"]["timeoutSeconds"].as<int>() * 1000, 4000);
  }
}

TEST(K8sTlsTest, EveryPodRolesCertificateIsNeeded) {
  std::vector<TlsIdentity> ids = TlsIdentities();
  ids.pop_back();  // no worker's
  auto manifests = K8sManifests(TlsSpec(), kToken, ids, "t.yaml");
  EXPECT_TRUE(absl::IsInvalidArgument(manifests.status())) << manifests.status();
  EXPECT_THAT(manifests.status().message(), HasSubstr("no certificate loaded for the worker"));
  // The files are read and checked as the role would (LoadTlsIdentity), naming the key.
  auto loaded = LoadK8sTls(TlsSpec());
  EXPECT_TRUE(absl::IsInvalidArgument(loaded.status())) << loaded.status();
  EXPECT_THAT(loaded.status().message(),
              HasSubstr("security.tls: cannot read the CA certificate /home/op/certs/ca.pem"));
  // Without TLS: nothing to load, no TLS Secret, no TLS volume.
  auto none = LoadK8sTls(Spec(kJob));
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  Objects plain = Generate(Spec(kJob));
  EXPECT_FALSE(plain.Has("Secret/ctr-server-tls"));
  for (const auto& v : PodSpecOf(plain.Get("Job/ctr-worker"))["volumes"]) {
    EXPECT_FALSE(v["secret"]);
  }
}

TEST(K8sSpecTest, KubernetesValuesAreCheckedWithTheSpec) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"k8s: {server_memory: 8GB}\n", "k8s.server_memory: must be a Kubernetes quantity"},
      {"k8s: {worker_cpu: \"-1\"}\n", "k8s.worker_cpu"},
      {"k8s: {coordinator_cpu: 1.5.0}\n", "k8s.coordinator_cpu"},
      {"k8s: {namespace: ML}\n", "k8s.namespace: must be a Kubernetes namespace"},
      {"k8s: {image: \"ecps latest\"}\n", "k8s.image"},
      {"k8s: {image_pull_policy: sometimes}\n", "k8s.image_pull_policy"},
      {"k8s: {checkpoint_claim: My_Claim}\n", "k8s.checkpoint_claim"},
      {"k8s: {service_account: -sa}\n", "k8s.service_account"},
      {"k8s: {node_selector: [disk]}\n", "k8s.node_selector[0]: must be a node label"},
      {"k8s: {node_selector: [\"a=b\", \"a=c\"]}\n", "k8s.node_selector[1]: names label a"},
  };
  for (const auto& [yaml, message] : bad) {
    auto spec = ParseSpec(yaml, "bad.yaml");
    ASSERT_FALSE(spec.ok()) << yaml;
    EXPECT_THAT(spec.status().message(), HasSubstr(message)) << yaml;
  }
  auto good = ParseSpec(
      "k8s: {server_memory: 1.5Gi, server_cpu: \"0.5\", worker_memory: 1e9, worker_cpu: 250m,"
      " coordinator_memory: \"\", node_selector: [\"node.kubernetes.io/instance-type=m5.large\","
      " \"gpu=\"]}\n",
      "good.yaml");
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(good->k8s.server_memory, "1.5Gi");
  EXPECT_EQ(good->k8s.namespace_name, "default");
  EXPECT_EQ(good->k8s.image_pull_policy, "IfNotPresent");
}

TEST(K8sCommandTest, WritesTheFilesKeepsTheTokenAndRemovesWhatIsGone) {
  std::string pattern = testing::TempDir() + "/k8s_command_XXXXXX";
  ASSERT_NE(mkdtemp(pattern.data()), nullptr);
  const fs::path dir = pattern;
  const fs::path spec_path = dir / "job.yaml";
  std::ofstream(spec_path) << kJob;
  const fs::path out = dir / "manifests";
  ASSERT_EQ(RunK8sCommand(spec_path.string(), out.string()), 0);
  for (const char* file : {"00-spec.configmap.yaml", "21-server.statefulset.yaml",
                           "22-spare.statefulset.yaml", "30-worker.job.yaml"}) {
    EXPECT_TRUE(fs::exists(out / file)) << file;
  }
  // The job's credential is for its owner only.
  struct stat st;
  ASSERT_EQ(::stat((out / "01-token.secret.yaml").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const std::string token =
      YAML::LoadFile((out / "01-token.secret.yaml").string())["stringData"]["token"]
          .as<std::string>();
  EXPECT_EQ(token.size(), 32u);

  // Again without spares: the same token (running pods keep theirs), no spare StatefulSet.
  std::string text = std::string(kJob);
  text.replace(text.find("spares: 1"), 9, "spares: 0");
  std::ofstream(spec_path, std::ios::trunc) << text;
  ASSERT_EQ(RunK8sCommand(spec_path.string(), out.string()), 0);
  EXPECT_EQ(YAML::LoadFile((out / "01-token.secret.yaml").string())["stringData"]["token"]
                .as<std::string>(),
            token);
  EXPECT_FALSE(fs::exists(out / "22-spare.statefulset.yaml"));
  // The coordinator's Job an earlier version wrote is removed: applying the folder must not
  // start a second coordinator beside the StatefulSet's.
  std::ofstream(out / "11-coordinator.job.yaml") << "kind: Job\n";
  ASSERT_EQ(RunK8sCommand(spec_path.string(), out.string()), 0);
  EXPECT_FALSE(fs::exists(out / "11-coordinator.job.yaml"));
  EXPECT_TRUE(fs::exists(out / "11-coordinator.statefulset.yaml"));

  // A spec Kubernetes cannot run: exit 2, nothing written.
  std::ofstream(spec_path, std::ios::trunc) << "job: {name: x}\n";
  EXPECT_EQ(RunK8sCommand(spec_path.string(), (dir / "none").string()), 2);
  EXPECT_FALSE(fs::exists(dir / "none"));
  fs::remove_all(dir);
}

TEST(K8sTokenTest, FreshTokensAreRandomHex) {
  const std::string a = RandomK8sToken();
  const std::string b = RandomK8sToken();
  EXPECT_EQ(a.size(), 32u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace ecps
