// Who may call each method of ecps' two services: the one table the gRPC glue checks
// (ps/grpc_parameter_server.h, coordinator/grpc_coordinator.cc), the tests sweep and
// docs/security.md lists. Least privilege: a role may call what its own code calls.
//  - Workers: the data path (Pull, Push, PullDense, PushDense) and, at the coordinator,
//    membership and their own reports.
//  - Servers: the peer and recovery RPCs (parity deltas, parity and dense reads and writes,
//    rebuild reads, freezes), and membership.
//  - The coordinator: freezes, scrubs and checkpoints on the servers.
//  - Admins (operator commands, `ecps run`'s launcher): scrub, kill and checkpoint the job,
//    and read its status; inject faults into a server that allows it (ECPS_FAULT_INJECTION).
#ifndef ECPS_RUNTIME_ACCESS_POLICY_H_
#define ECPS_RUNTIME_ACCESS_POLICY_H_

#include <span>
#include <string_view>

#include "runtime/security.h"

namespace ecps {

struct MethodAccess {
  std::string_view method;
  RoleSet roles;
};

inline constexpr MethodAccess kParameterServerAccess[] = {
    {"Pull", {Role::kWorker}},
    {"Push", {Role::kWorker}},
    {"PullDense", {Role::kWorker}},
    {"PushDense", {Role::kWorker}},
    {"ReadRows", {Role::kServer, Role::kCoordinator}},  // rebuild reads
    {"Health", {Role::kServer, Role::kCoordinator}},
    {"ApplyParityDeltas", {Role::kServer}},
    {"ReplicateDense", {Role::kServer}},
    {"Freeze", {Role::kServer, Role::kCoordinator}},
    {"ScrubParity", {Role::kCoordinator}},
    // And servers: the online scrub compares a dense replica with its primary.
    {"DenseChecksums", {Role::kCoordinator, Role::kServer}},
    {"HotRows", {Role::kServer}},
    {"ReadParity", {Role::kServer}},
    {"WriteParity", {Role::kServer}},
    {"ReadDense", {Role::kServer}},
    {"SaveCheckpoint", {Role::kCoordinator}},
    {"LoadCheckpoint", {Role::kCoordinator}},
    {"WriteRows", {Role::kServer}},  // the online scrub's repair of a data row
    // Fault injection (drills, tests): operators only, and only on a server started with
    // ECPS_FAULT_INJECTION=1.
    {"InjectFault", {Role::kAdmin}},
};

// Register and Heartbeat also require the role in the request to be the caller's own: a
// worker's credential cannot join as a server.
inline constexpr MethodAccess kCoordinatorAccess[] = {
    {"Register", {Role::kServer, Role::kWorker}},
    {"Heartbeat", {Role::kServer, Role::kWorker}},
    {"WatchClusterMap", {Role::kServer, Role::kWorker, Role::kAdmin}},
    {"ReportFailure", {Role::kServer, Role::kWorker}},
    {"Status", {Role::kCoordinator, Role::kServer, Role::kWorker, Role::kAdmin}},
    {"Scrub", {Role::kAdmin}},
    {"Kill", {Role::kAdmin}},
    {"Checkpoint", {Role::kAdmin}},
};

// The roles that may call `method` of `table`; nobody for a method the table lacks, so a new
// RPC is closed to everyone until it is given a row (access_test checks that every method of
// the services has one).
constexpr RoleSet AccessOf(std::span<const MethodAccess> table, std::string_view method) {
  for (const MethodAccess& m : table) {
    if (m.method == method) return m.roles;
  }
  return RoleSet({});
}

}  // namespace ecps

#endif  // ECPS_RUNTIME_ACCESS_POLICY_H_
