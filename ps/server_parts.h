// Builds everything a parameter server holds from the job spec: its data rows, dense tensors
// (primary and replicas) and, with fault tolerance, its parity rows, the code, the peer
// client and the parity delta streams. Shared by `ecps server` and in-process test clusters.
#ifndef ECPS_PS_SERVER_PARTS_H_
#define ECPS_PS_SERVER_PARTS_H_

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ps/delta_stream.h"
#include "ps/parameter_server.h"
#include "ps/tcp_deltas.h"
#include "runtime/spec.h"

namespace ecps {

// (k, r) of the row code a mode implies: none/checkpoint (1, 0), replication (1, r),
// erasure_code (k, r).
void RowCodeShape(const FaultToleranceSection& ft, int* k, int* r);

// What a replacement server needs to rebuild: which servers are unusable now and which are
// alive (from the cluster map).
struct RecoveryHooks {
  std::function<std::set<int>()> unusable;
  std::function<std::vector<int>()> live_peers;
  // Whether every worker has finished: the rebuild then ignores its rate limit (no training
  // is left to protect, and the job's end waits for the rebuild). Optional.
  std::function<bool()> training_done;
};

// `addresses` are every server's address by id (the cluster map's); `core` stamps the delta
// streams' headers with its token and current epoch; `instance` is this process's
// incarnation. `transport` overrides the peer client as the delta streams' network (tests
// inject faults there); null uses the peer client. With `recovery` set the server is a
// replacement: its rows start lost and a Rebuilder rebuilds them (call core->StartRebuild()
// after Install). `report_unreachable`, when set, hears of every peer server an RPC to
// which failed as if it were down.
// RESOURCE_EXHAUSTED, naming the sizes, when the tables cannot be allocated (more than the
// machine's available memory, or the allocation fails).
absl::StatusOr<ServerParts> BuildServerParts(
    const JobSpec& spec, int server, const std::vector<std::string>& addresses,
    const ParameterServerCore* core, const std::string& instance,
    DeltaTransport* transport = nullptr, const RecoveryHooks* recovery = nullptr,
    UnreachableFn report_unreachable = nullptr);

// With fault_tolerance.parity_transport tcp: listens for parity batches over TCP on `host`
// (ps/tcp_deltas.h), admits each as the gRPC method ApplyParityDeltas is admitted and applies
// it to `core`, and has `core` offer the port in its acks. Null without tcp. Destroy it
// before `core`.
absl::StatusOr<std::unique_ptr<TcpDeltaListener>> ServeParityOverTcp(
    const JobSpec& spec, ParameterServerCore* core, const std::string& host);

// Bytes of the data and parity row arrays `server` allocates for `spec`.
int64_t ServerTableBytes(const JobSpec& spec, int server);
// MemAvailable of /proc/meminfo in bytes, or -1 when it cannot be read.
int64_t AvailableMemoryBytes();

}  // namespace ecps

#endif  // ECPS_PS_SERVER_PARTS_H_
