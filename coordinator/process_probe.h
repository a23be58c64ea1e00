// Whether a reported node's process is gone, asked of the network: a TCP connect to its
// address that the host refuses (nothing listens on the port any more: the process exited
// or was killed) says so at once. A stopped process still accepts connections, and a host
// that does not answer (a partition, a dead machine) gives no verdict: both leave the
// decision to the heartbeat timeouts.
#ifndef ECPS_COORDINATOR_PROCESS_PROBE_H_
#define ECPS_COORDINATOR_PROCESS_PROBE_H_

#include <string>

namespace ecps {

// True only when connecting to `address` ("host:port") is refused within `timeout_ms`;
// false when it connects, times out, or the address cannot be resolved.
bool ConnectionRefused(const std::string& address, int timeout_ms);

}  // namespace ecps

#endif  // ECPS_COORDINATOR_PROCESS_PROBE_H_
