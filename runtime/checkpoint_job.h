// Checkpoints of a running job: the layout a job's spec implies, finding the checkpoint a
// job resumes from, and the coordinator's side of saving one across the servers over RPC
// (docs/checkpoints.md, "Saving, resuming, resharding"). The file format itself is
// runtime/checkpoint.h.
#ifndef ECPS_RUNTIME_CHECKPOINT_JOB_H_
#define ECPS_RUNTIME_CHECKPOINT_JOB_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/ecps.pb.h"
#include "runtime/checkpoint.h"
#include "runtime/spec.h"

namespace ecps {

// The layout of a checkpoint of this job's model at `step`: table rows, payload size (the
// sparse optimizer's), every dense tensor's size and optimizer-state size.
absl::StatusOr<CheckpointLayout> CheckpointLayoutFor(const JobSpec& spec, int64_t step = 0);

// The checkpoint directory `path` names: `path` itself when it is a checkpoint directory
// (it holds a MANIFEST.json, a table or dense file, or is named step-N), otherwise the newest
// committed checkpoint under it (LatestCheckpoint). A checkpoint directory without its
// manifest is refused here: NOT_FOUND "DIR/MANIFEST.json: missing".
absl::StatusOr<std::string> ResolveCheckpointDir(const std::string& path);

// Finds (ResolveCheckpointDir), reads and checks the checkpoint `spec.job.resume_from` names
// against the job's model (CheckLayoutMatches). With `verify` every file's size and checksum
// are checked too (VerifyCheckpoint: reads every byte). Errors name the file at fault.
absl::StatusOr<Manifest> OpenResumeCheckpoint(const JobSpec& spec, bool verify);

// The workers' progress at the moment of the save (read after the servers are frozen).
struct CheckpointProgress {
  int64_t step = 0;
  std::vector<int64_t> reader_positions;  // one per worker
};

// Saves a checkpoint of the servers at `addresses` (every server by id) under `root`:
// freezes every server (new updates wait, in-flight ones finish, parity streams drain), asks
// `progress` for the step and reader positions, BeginCheckpoint, SaveCheckpoint on every
// server in parallel, CommitCheckpoint with the combined checksums, and always unfreezes
// every server it froze. `layout` gives the model (its step is replaced by progress's).
// On failure report.error says why and nothing is published. `on_unreachable`, when set,
// hears at once of a server whose save failed without an answer (AnsweredByPeer): a server
// killed mid-save, while the others keep training frozen and so cannot report it.
v1::CheckpointReport SaveCheckpointOnServers(
    const std::vector<std::string>& addresses, const std::string& token, uint64_t epoch,
    int rpc_timeout_ms, const std::string& root, CheckpointLayout layout,
    const std::function<CheckpointProgress()>& progress,
    const std::function<void(int server, const std::string& address)>& on_unreachable = nullptr);

// Rollback (mode checkpoint): has every server at `addresses` reload the newest committed
// checkpoint under `root` (LoadCheckpoint, in parallel). Returns its directory, step and
// reader positions; an error names the server or the file.
absl::StatusOr<v1::CheckpointReport> ReloadCheckpointOnServers(
    const std::vector<std::string>& addresses, const std::string& token, uint64_t epoch,
    int rpc_timeout_ms, const std::string& root);

}  // namespace ecps

#endif  // ECPS_RUNTIME_CHECKPOINT_JOB_H_
