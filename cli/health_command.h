// `ecps health ADDR ROLE [--service S]`: one grpc.health.v1 Check of a role's health service,
// over mutual TLS when given a certificate. What `ecps k8s` runs as the exec probe of a TLS
// job's pods: Kubernetes' own gRPC probes present no client certificate, and a TLS role
// completes no handshake without one (docs/security.md).
#ifndef ECPS_CLI_HEALTH_COMMAND_H_
#define ECPS_CLI_HEALTH_COMMAND_H_

#include <string>

#include "runtime/security.h"

namespace ecps {

// Exit codes of RunHealthCommand: anything but kHealthServing fails a probe.
inline constexpr int kHealthServing = 0;
inline constexpr int kHealthNotServing = 1;   // NOT_SERVING, UNKNOWN, or a service it lacks
inline constexpr int kHealthUnreachable = 2;  // no answer: refused, handshake failed, deadline

// Asks the `peer` process at `address` (host:port) about `service` ("" : the process itself),
// within `deadline_ms`, over `tls` (null: plaintext; else the channel presents its
// certificate and accepts only a server whose certificate names `peer`). Prints the status
// ("SERVING") to stdout, or why there is none to stderr, one line.
int RunHealthCommand(const std::string& address, Role peer, const std::string& service,
                     int deadline_ms, const TlsIdentity* tls);

}  // namespace ecps

#endif  // ECPS_CLI_HEALTH_COMMAND_H_
