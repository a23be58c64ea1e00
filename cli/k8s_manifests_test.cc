// `ecps k8s`'s objects and how they fit together (files, names, Services, the coordinator's
// StatefulSet, the Secret), what it refuses, and the command. What runs in the pods:
// k8s_pods_test.cc; with TLS: k8s_tls_test.cc; the YAML writer: k8s_yaml_test.cc.
#include "cli/k8s_manifests.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "cli/k8s_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/security.h"
#include "yaml-cpp/yaml.h"

namespace ecps {
namespace {

namespace fs = std::filesystem;
using k8s_test::ContainerOf;
using k8s_test::Generate;
using k8s_test::kJob;
using k8s_test::kToken;
using k8s_test::Objects;
using k8s_test::PodSpecFrom;
using k8s_test::PodSpecOf;
using k8s_test::PortNamed;
using k8s_test::Selects;
using k8s_test::Spec;
using k8s_test::Strings;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

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
  EXPECT_EQ(secret["worker-token"].as<std::string>(), RoleToken("s3cret-job-token", Role::kWorker));
  EXPECT_EQ(secret["admin-token"].as<std::string>(), RoleToken("s3cret-job-token", Role::kAdmin));
  for (const K8sManifest& m : *manifests) {
    if (m.kind != "Secret") {
      EXPECT_THAT(m.yaml, Not(HasSubstr("s3cret-job-token"))) << m.file;
    }
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
    EXPECT_TRUE(
        Selects(s["spec"]["selector"]["matchLabels"], s["spec"]["template"]["metadata"]["labels"]))
        << set;
    EXPECT_EQ(s["spec"]["podManagementPolicy"].as<std::string>(), "Parallel") << set;
    EXPECT_EQ(PortNamed(ContainerOf(s), "grpc")["containerPort"].as<int>(), kK8sServerPort);
  }
  // Each StatefulSet selects only its own pods.
  EXPECT_FALSE(
      Selects(objects.Get("StatefulSet/ctr-server")["spec"]["selector"]["matchLabels"],
              objects.Get("StatefulSet/ctr-spare")["spec"]["template"]["metadata"]["labels"]));
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
  spec = Spec(
      "k8s: {image: \"ecps:1\"}\nfault_tolerance: {mode: checkpoint}\n"
      "cluster: {servers: 1}\n");
  EXPECT_THAT(CheckK8sSpec(spec).message(), HasSubstr("fault_tolerance.mode is checkpoint"));
  EXPECT_TRUE(CheckK8sSpec(Spec("k8s: {image: \"ecps:1\", checkpoint_claim: ck}\n")).ok());
  EXPECT_TRUE(CheckK8sSpec(Spec("k8s: {image: \"ecps:1\"}\n"
                                "fault_tolerance: {checkpoint: {save_final: false}}\n"))
                  .ok());
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
