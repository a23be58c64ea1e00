#include "coordinator/process_probe.h"

#include "runtime/peer_probe.h"

namespace ecps {

bool ConnectionRefused(const std::string& address, int timeout_ms) {
  return ProbeTcp(address, timeout_ms) == TcpProbe::kRefused;
}

}  // namespace ecps
