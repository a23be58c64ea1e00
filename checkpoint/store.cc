#include "checkpoint/store.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "checkpoint/format.h"
#include "runtime/posix_file.h"
#include "runtime/status_macros.h"

namespace ecps {
namespace {

// Parses "step-<digits>" (exactly); -1 for anything else.
int64_t StepOfDirName(absl::string_view name) {
  constexpr absl::string_view kPrefix = "step-";
  if (name.substr(0, kPrefix.size()) != kPrefix || name.size() == kPrefix.size() ||
      name.size() > kPrefix.size() + 18) {
    return -1;
  }
  int64_t step = 0;
  for (char c : name.substr(kPrefix.size())) {
    if (c < '0' || c > '9') return -1;
    step = step * 10 + (c - '0');
  }
  return step;
}

struct StepDir {
  int64_t step;
  std::string dir;
  bool committed;  // step-N with a MANIFEST.json; otherwise step-N.tmp or step-N without one
};

// The directories under ROOT named step-N or step-N.tmp, in no order; none when ROOT is
// missing.
absl::StatusOr<std::vector<StepDir>> ListStepDirs(const std::string& root, Env* env) {
  ASSIGN_OR_RETURN(FileKind root_kind, env->GetFileKind(root));
  if (root_kind == FileKind::kMissing) return std::vector<StepDir>{};
  ASSIGN_OR_RETURN(std::vector<DirEntry> entries, env->ListDir(root));
  std::vector<StepDir> found;
  for (const DirEntry& entry : entries) {
    absl::string_view name = entry.name;
    const bool tmp = absl::ConsumeSuffix(&name, ".tmp");
    const int64_t step = StepOfDirName(name);
    if (step < 0 || entry.kind != FileKind::kDirectory) continue;
    const std::string dir = JoinPath(root, entry.name);
    absl::StatusOr<FileKind> manifest = env->GetFileKind(JoinPath(dir, kManifestName));
    const bool committed = !tmp && manifest.ok() && *manifest == FileKind::kFile;
    found.push_back(StepDir{step, dir, committed});
  }
  return found;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ListCheckpoints(const std::string& root, Env* env) {
  ASSIGN_OR_RETURN(std::vector<StepDir> found, ListStepDirs(root, env));
  std::sort(found.begin(), found.end(), [](const StepDir& a, const StepDir& b) {
    return std::tie(a.step, a.dir) > std::tie(b.step, b.dir);
  });
  std::vector<std::string> dirs;
  for (StepDir& f : found) {
    if (f.committed) dirs.push_back(std::move(f.dir));
  }
  return dirs;
}

absl::StatusOr<std::string> LatestCheckpoint(const std::string& root, Env* env) {
  ASSIGN_OR_RETURN(std::vector<std::string> dirs, ListCheckpoints(root, env));
  if (dirs.empty()) {
    return FileError(absl::StatusCode::kNotFound, root, "no committed checkpoint");
  }
  return dirs.front();
}

absl::StatusOr<std::vector<std::string>> PruneCheckpoints(const std::string& root, int keep,
                                                          int64_t keep_step, Env* env) {
  if (keep < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("keep is ", keep, ": at least one checkpoint must be kept"));
  }
  ASSIGN_OR_RETURN(std::vector<StepDir> found, ListStepDirs(root, env));

  // Newest first; the kept ones: keep_step's, then the newest others.
  std::sort(found.begin(), found.end(),
            [](const StepDir& a, const StepDir& b) { return a.step > b.step; });
  int64_t newest = -1;
  int kept = 0;
  for (const StepDir& f : found) {
    if (!f.committed) continue;
    newest = std::max(newest, f.step);
    if (f.step == keep_step) ++kept;
  }
  if (newest < 0) return std::vector<std::string>{};  // nothing committed: nothing to judge by
  std::vector<const StepDir*> doomed;
  for (const StepDir& f : found) {
    if (f.committed) {
      if (f.step == keep_step) continue;
      if (kept < keep) {
        ++kept;
        continue;
      }
      doomed.push_back(&f);
    } else if (f.step < newest) {
      doomed.push_back(&f);  // a leftover: a crashed save's step-N.tmp, an interrupted prune
    }
  }

  std::vector<std::string> removed;
  for (auto d = doomed.rbegin(); d != doomed.rend(); ++d) {  // oldest first
    const StepDir& f = **d;
    if (f.committed) {
      // Unpublish first: whatever happens next, readers no longer take it for a checkpoint.
      RETURN_IF_ERROR(env->RemoveFile(JoinPath(f.dir, kManifestName)));
      RETURN_IF_ERROR(env->SyncPath(f.dir));
    }
    RETURN_IF_ERROR(env->RemoveAll(f.dir));
    removed.push_back(f.dir);
  }
  if (!removed.empty()) RETURN_IF_ERROR(env->SyncPath(root));
  return removed;
}

}  // namespace ecps
