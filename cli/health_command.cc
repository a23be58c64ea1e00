#include "cli/health_command.h"

#include <cstdio>

#include "runtime/health.h"

namespace ecps {

int RunHealthCommand(const std::string& address, Role peer, const std::string& service,
                     int deadline_ms, const TlsIdentity* tls) {
  const std::string shown = service.empty() ? "\"\"" : service;
  absl::StatusOr<HealthStatus> status = CheckHealth(address, peer, service, deadline_ms, tls);
  if (absl::IsNotFound(status.status())) {
    std::printf("%s: SERVICE_UNKNOWN\n", shown.c_str());
    return kHealthNotServing;
  }
  if (!status.ok()) {
    std::fprintf(stderr, "ecps health: cannot ask the %s at %s: %s%s\n", RoleName(peer),
                 address.c_str(), std::string(status.status().message()).c_str(),
                 tls == nullptr ? " (with security.tls: --tls-ca, --tls-cert, --tls-key)" : "");
    return kHealthUnreachable;
  }
  std::printf("%s: %s\n", shown.c_str(), ToString(*status));
  return *status == HealthStatus::kServing ? kHealthServing : kHealthNotServing;
}

}  // namespace ecps
