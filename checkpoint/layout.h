// A job's checkpoints as its spec sees them (docs/checkpoints.md, "Saving, resuming,
// resharding"): the layout the spec's model implies, and the checkpoint a job resumes from.
// Servers, workers, the coordinator and the launcher use it; the file format itself is
// checkpoint/checkpoint.h, and the coordinator's save across the servers
// coordinator/checkpoint_job.h.
#ifndef ECPS_CHECKPOINT_LAYOUT_H_
#define ECPS_CHECKPOINT_LAYOUT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "checkpoint/checkpoint.h"  // the format: what callers read a resumed checkpoint with
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

}  // namespace ecps

#endif  // ECPS_CHECKPOINT_LAYOUT_H_
