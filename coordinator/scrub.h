// Scrub: checks, at a consistent point, that every stripe's parity equals a fresh encode of
// its data rows byte for byte, and that every dense replica equals its primary.
//
// ScrubServers freezes every server (new updates wait, in-flight ones finish, parity delta
// streams drain), has each server check the parity rows it holds, compares dense checksums,
// and always unfreezes every server it froze. Used by the coordinator's Scrub RPC (and so by
// `ecps scrub` and the end of every erasure_code job) and by tests.
#ifndef ECPS_COORDINATOR_SCRUB_H_
#define ECPS_COORDINATOR_SCRUB_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/ecps.pb.h"
#include "runtime/rpc.h"

namespace ecps {

// `addresses`: every server by id; `stamp` the map's epoch and the coordinator's term. Returns the report; a server that cannot be reached makes
// the report's error non-empty (and clean false) rather than an error status.
v1::ScrubReport ScrubServers(const std::vector<std::string>& addresses, const std::string& token,
                             const CoordinatorStamp& stamp, int rpc_timeout_ms);

}  // namespace ecps

#endif  // ECPS_COORDINATOR_SCRUB_H_
