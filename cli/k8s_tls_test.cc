// `ecps k8s` for a job with security.tls: a Secret per role, each pod with its own role's
// certificate, exec probes that present it, and the spec the pods read naming the mount.
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

using k8s_test::ContainerOf;
using k8s_test::Generate;
using k8s_test::kJob;
using k8s_test::kToken;
using k8s_test::Objects;
using k8s_test::PodSpecOf;
using k8s_test::Spec;
using k8s_test::Strings;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

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

}  // namespace
}  // namespace ecps
