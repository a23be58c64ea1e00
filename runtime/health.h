// Standard gRPC health checking (grpc.health.v1.Health) on every role, so that Kubernetes'
// native gRPC probes, grpc_health_probe and load balancers can ask a role how it is.
//
// Each role reports two things (docs/deploy.md, "Health"):
//   ""                      SERVING while the process runs and its gRPC server answers
//                           (liveness: nothing a restart would fix).
//   the role's service      SERVING while the role can answer that service's requests
//   ("ecps.v1.Coordinator",  (readiness). A parameter server is SERVING when ACTIVE and when
//    "ecps.v1.ParameterServer") RECOVERING: a replacement answers every pull of its shard, rows
//                           it has not rebuilt yet on demand. It is NOT_SERVING while it
//                           starts (initialising or loading its shard) and as a standby spare,
//                           which holds no shard.
// StartGrpcServer turns the service on for every server it starts.
#ifndef ECPS_RUNTIME_HEALTH_H_
#define ECPS_RUNTIME_HEALTH_H_

#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"
#include "runtime/security.h"

namespace ecps {

inline constexpr char kLivenessService[] = "";
inline constexpr char kCoordinatorHealthService[] = "ecps.v1.Coordinator";
inline constexpr char kParameterServerHealthService[] = "ecps.v1.ParameterServer";

// What grpc.health.v1's HealthCheckResponse.ServingStatus says.
enum class HealthStatus { kUnknown = 0, kServing = 1, kNotServing = 2, kServiceUnknown = 3 };

const char* ToString(HealthStatus status);  // "SERVING", "NOT_SERVING", ...

// Sets what `service` reports on `server` (started by StartGrpcServer).
void SetHealth(grpc::Server* server, const std::string& service, bool serving);

// Asks the health service at `address` (host:port), a process of role `peer`, about
// `service` once, over `tls` (by default this process's; null: plaintext). NOT_FOUND when the
// server does not know the service; the RPC's error when it could not be asked (a TLS server
// asked in plaintext, or whose certificate does not name `peer`: UNAVAILABLE).
absl::StatusOr<HealthStatus> CheckHealth(const std::string& address, Role peer,
                                         const std::string& service, int deadline_ms,
                                         const TlsIdentity* tls = ProcessTls());

}  // namespace ecps

#endif  // ECPS_RUNTIME_HEALTH_H_
