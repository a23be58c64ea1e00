// The coordinator's side of a running job's checkpoints: saving one across the servers over
// RPC, and reloading the newest on every server (docs/checkpoints.md, "Saving, resuming,
// resharding"). The file format is checkpoint/checkpoint.h; the layout from the spec and
// the resume lookup are checkpoint/layout.h.
#ifndef ECPS_COORDINATOR_CHECKPOINT_JOB_H_
#define ECPS_COORDINATOR_CHECKPOINT_JOB_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "checkpoint/format.h"
#include "proto/ecps.pb.h"
#include "runtime/rpc.h"

namespace ecps {

// The workers' progress at the moment of the save (read after the servers are frozen).
struct CheckpointProgress {
  int64_t step = 0;
  std::vector<int64_t> reader_positions;  // one per worker
};

// Saves a checkpoint of the servers at `addresses` (every server by id) under `root`, as the
// coordinator `stamp` says (the map's epoch, its term):
// freezes every server (new updates wait, in-flight ones finish, parity streams drain), asks
// `progress` for the step and reader positions, BeginCheckpoint, SaveCheckpoint on every
// server in parallel, CommitCheckpoint with the combined checksums, and always unfreezes
// every server it froze. `layout` gives the model (its step is replaced by progress's).
// On failure report.error says why and nothing is published. `on_unreachable`, when set,
// hears at once of a server whose save failed without an answer (AnsweredByPeer): a server
// killed mid-save, while the others keep training frozen and so cannot report it.
v1::CheckpointReport SaveCheckpointOnServers(
    const std::vector<std::string>& addresses, const std::string& token,
    const CoordinatorStamp& stamp, int rpc_timeout_ms, const std::string& root, CheckpointLayout layout,
    const std::function<CheckpointProgress()>& progress,
    const std::function<void(int server, const std::string& address)>& on_unreachable = nullptr);

// Rollback (mode checkpoint): has every server at `addresses` reload the newest committed
// checkpoint under `root` (LoadCheckpoint, in parallel). Returns its directory, step and
// reader positions; an error names the server or the file.
absl::StatusOr<v1::CheckpointReport> ReloadCheckpointOnServers(
    const std::vector<std::string>& addresses, const std::string& token,
    const CoordinatorStamp& stamp, int rpc_timeout_ms, const std::string& root);

}  // namespace ecps

#endif  // ECPS_COORDINATOR_CHECKPOINT_JOB_H_
