// What runs in each pod of `ecps k8s`: the token, the spec and the coordinator's address, the
// server's id from its ordinal and its wrapper script, the worker's from its completion index,
// probes, resources, scrape annotations and the checkpoint volume.
#include <stdlib.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/k8s_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/security.h"
#include "yaml-cpp/yaml.h"

namespace ecps {
namespace {

namespace fs = std::filesystem;
using k8s_test::ContainerOf;
using k8s_test::EnvOf;
using k8s_test::Generate;
using k8s_test::kJob;
using k8s_test::Objects;
using k8s_test::PodSpecFrom;
using k8s_test::PodSpecOf;
using k8s_test::PortNamed;
using k8s_test::Spec;
using k8s_test::Strings;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(K8sPodsTest, EveryRoleGetsTheTokenTheSpecAndTheCoordinator) {
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

TEST(K8sPodsTest, PodOrdinalIsTheServerIdAndCompletionIndexTheWorkerId) {
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
  EXPECT_EQ(EnvOf(worker, "ECPS_WORKER_ID")["valueFrom"]["fieldRef"]["fieldPath"].as<std::string>(),
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
    const std::string command =
        absl::StrCat("cd '", dir_.string(), "' && PATH='", dir_.string(),
                     "':/usr/bin:/bin POD_NAME=ctr-server-3", " LOG=calls FIRST_RC=", first_rc,
                     " sh server.sh 2>/dev/null");
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

TEST(K8sPodsTest, ProbesResourcesAndScrapeAnnotations) {
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
  EXPECT_EQ(
      Generate(own)
          .Get(
              "Job/ctr-worker")["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"]
          .as<std::string>(),
      "9100");
}

// GPU workers ask the NVIDIA device plugin for their GPUs (a limit: Kubernetes takes device
// resources as limits); CPU workers and the servers ask for none.
TEST(K8sPodsTest, GpuWorkersLimitTheirGpus) {
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

// The same without a CUDA build (the manifests do not depend on it), for a worker that asks
// for no CPU or memory of its own: only the GPUs, as a limit.
TEST(K8sPodsTest, AGpuWorkerWithoutCpuOrMemoryAsksForItsGpusOnly) {
  JobSpec spec = Spec(kJob);
  spec.cluster.worker_device = WorkerDevice::kCuda;
  spec.cluster.gpus_per_worker = 2;
  spec.k8s.worker_cpu.clear();
  spec.k8s.worker_memory.clear();
  const YAML::Node resources = ContainerOf(Generate(spec).Get("Job/ctr-worker"))["resources"];
  EXPECT_TRUE(resources["requests"].IsMap());
  EXPECT_EQ(resources["requests"].size(), 0u);
  ASSERT_TRUE(resources["limits"].IsMap());
  EXPECT_EQ(resources["limits"].size(), 1u);
  EXPECT_EQ(resources["limits"]["nvidia.com/gpu"].as<std::string>(), "2");
  EXPECT_EQ(resources["limits"]["nvidia.com/gpu"].Tag(), "!");  // a quantity is a string
}

TEST(K8sPodsTest, TheCheckpointVolumeIsSharedByTheCoordinatorAndTheServers) {
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

}  // namespace
}  // namespace ecps
