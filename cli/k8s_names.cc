#include "cli/k8s_names.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "cli/k8s_manifests.h"
#include "runtime/net.h"

namespace ecps::k8s {

const char* PodRoleName(PodRole role) {
  switch (role) {
    case PodRole::kCoordinator:
      return "coordinator";
    case PodRole::kServer:
      return "server";
    case PodRole::kSpare:
      return "spare";
    case PodRole::kWorker:
      return "worker";
  }
  return "";
}

Role CredentialRole(PodRole role) {
  switch (role) {
    case PodRole::kCoordinator:
      return Role::kCoordinator;
    case PodRole::kServer:
    case PodRole::kSpare:
      return Role::kServer;
    case PodRole::kWorker:
      return Role::kWorker;
  }
  return Role::kWorker;
}

Names::Names(const JobSpec& spec)
    : job(spec.job.name),
      ns(spec.k8s.namespace_name),
      spec_map(job + "-spec"),
      token_secret(job + "-token"),
      coordinator(job + "-coordinator"),
      server(job + "-server"),
      spare(job + "-spare"),
      worker(job + "-worker"),
      server_domain(absl::StrCat(server, ".", ns, ".svc")),
      coordinator_address(
          JoinHostPort(absl::StrCat(coordinator, ".", ns, ".svc"), CoordinatorPort(spec))) {}

std::string Names::TlsSecret(Role role) const {
  return absl::StrCat(job, "-", RoleName(role), "-tls");
}

int CoordinatorPort(const JobSpec& spec) {
  return spec.cluster.coordinator_port != 0 ? spec.cluster.coordinator_port : kK8sCoordinatorPort;
}

int MetricsPort(const JobSpec& spec) {
  return spec.monitoring.metrics_port == 0 ? kK8sMetricsPort : spec.monitoring.metrics_port;
}

int RolePort(const JobSpec& spec, PodRole role) {
  switch (role) {
    case PodRole::kCoordinator:
      return CoordinatorPort(spec);
    case PodRole::kServer:
    case PodRole::kSpare:
      return kK8sServerPort;
    case PodRole::kWorker:
      return kK8sWorkerPort;
  }
  return 0;
}

std::string PodPath(const std::string& path) {
  std::filesystem::path p(path);
  if (p.is_relative()) p = std::filesystem::path(kK8sWorkDir) / p;
  return p.lexically_normal().string();
}

}  // namespace ecps::k8s
