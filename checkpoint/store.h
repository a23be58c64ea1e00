// The checkpoints under one ROOT directory (spec: fault_tolerance.checkpoint.dir): which are
// committed, the newest, and pruning (docs/checkpoints.md, "Keeping checkpoints"). Every file
// operation goes through `env` (runtime/env.h), the POSIX one unless a test injects faults.
#ifndef ECPS_CHECKPOINT_STORE_H_
#define ECPS_CHECKPOINT_STORE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/env.h"

namespace ecps {

// Committed checkpoints under ROOT (directories step-N holding a MANIFEST.json), newest
// (highest step) first. *.tmp directories and other entries are ignored. An absent ROOT
// gives an empty list. Does not read or verify the manifests.
absl::StatusOr<std::vector<std::string>> ListCheckpoints(const std::string& root,
                                                         Env* env = Env::Default());
// The newest committed checkpoint under ROOT; NOT_FOUND naming ROOT when there is none.
absl::StatusOr<std::string> LatestCheckpoint(const std::string& root, Env* env = Env::Default());

// Deletes old checkpoints under ROOT so that `keep` committed ones remain: the one of step
// `keep_step` when it is committed (normally the one just written; -1: none) and the newest
// others. Also deletes what a crashed save or an interrupted prune left behind below the newest
// committed step: step-N.tmp directories and step-N directories without a MANIFEST.json.
// Nothing else under ROOT is touched. A checkpoint is unpublished first (its MANIFEST.json
// removed and the directory fsynced) and then removed, so an interrupted prune leaves only a
// directory that readers ignore. Returns the removed directories, oldest first; on an error
// (naming the path) it stops there, having removed the ones before. INVALID_ARGUMENT when
// keep < 1. Not safe against a save, load or prune of the same ROOT at the same time: the
// caller serialises them (the coordinator does).
absl::StatusOr<std::vector<std::string>> PruneCheckpoints(const std::string& root, int keep,
                                                          int64_t keep_step = -1,
                                                          Env* env = Env::Default());

}  // namespace ecps

#endif  // ECPS_CHECKPOINT_STORE_H_
