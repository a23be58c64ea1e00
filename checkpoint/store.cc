#include "checkpoint/store.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <functional>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "checkpoint/format.h"
#include "runtime/posix_file.h"
#include "runtime/status_macros.h"

namespace ecps {
namespace {

namespace fs = std::filesystem;

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

}  // namespace

absl::StatusOr<std::vector<std::string>> ListCheckpoints(const std::string& root) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  if (!fs::exists(root, ec)) return std::vector<std::string>{};
  fs::directory_iterator it(root, ec);
  if (ec) return FileError(absl::StatusCode::kInternal, root, "listing failed: " + ec.message());
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    int64_t step = StepOfDirName(it->path().filename().string());
    if (step < 0 || !it->is_directory(ec)) continue;
    if (!fs::is_regular_file(it->path() / kManifestName, ec)) continue;
    found.emplace_back(step, it->path().string());
  }
  if (ec) return FileError(absl::StatusCode::kInternal, root, "listing failed: " + ec.message());
  std::sort(found.begin(), found.end(), std::greater<>());
  std::vector<std::string> dirs;
  for (auto& [step, dir] : found) dirs.push_back(std::move(dir));
  return dirs;
}

absl::StatusOr<std::string> LatestCheckpoint(const std::string& root) {
  ASSIGN_OR_RETURN(std::vector<std::string> dirs, ListCheckpoints(root));
  if (dirs.empty()) {
    return FileError(absl::StatusCode::kNotFound, root, "no committed checkpoint");
  }
  return dirs.front();
}

absl::StatusOr<std::vector<std::string>> PruneCheckpoints(const std::string& root, int keep,
                                                          int64_t keep_step) {
  if (keep < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("keep is ", keep, ": at least one checkpoint must be kept"));
  }
  struct Found {
    int64_t step;
    std::string dir;
    bool committed;  // step-N with a MANIFEST.json; otherwise step-N.tmp or step-N without one
  };
  std::vector<Found> found;
  std::error_code ec;
  if (!fs::exists(root, ec)) return std::vector<std::string>{};
  fs::directory_iterator it(root, ec);
  if (ec) return FileError(absl::StatusCode::kInternal, root, "listing failed: " + ec.message());
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    std::string name = it->path().filename().string();
    const bool tmp = absl::EndsWith(name, ".tmp");
    if (tmp) name.resize(name.size() - 4);
    const int64_t step = StepOfDirName(name);
    if (step < 0 || !it->is_directory(ec)) continue;
    const bool committed = !tmp && fs::is_regular_file(it->path() / kManifestName, ec);
    found.push_back(Found{step, it->path().string(), committed});
  }
  if (ec) return FileError(absl::StatusCode::kInternal, root, "listing failed: " + ec.message());

  // Newest first; the kept ones: keep_step's, then the newest others.
  std::sort(found.begin(), found.end(),
            [](const Found& a, const Found& b) { return a.step > b.step; });
  int64_t newest = -1;
  int kept = 0;
  for (const Found& f : found) {
    if (!f.committed) continue;
    newest = std::max(newest, f.step);
    if (f.step == keep_step) ++kept;
  }
  if (newest < 0) return std::vector<std::string>{};  // nothing committed: nothing to judge by
  std::vector<const Found*> doomed;
  for (const Found& f : found) {
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
    const Found& f = **d;
    if (f.committed) {
      // Unpublish first: whatever happens next, readers no longer take it for a checkpoint.
      const std::string manifest = JoinPath(f.dir, kManifestName);
      if (::unlink(manifest.c_str()) != 0) return ErrnoError(manifest, "unlink", errno);
      RETURN_IF_ERROR(FsyncPath(f.dir));
    }
    fs::remove_all(f.dir, ec);
    if (ec) return FileError(absl::StatusCode::kInternal, f.dir, "remove failed: " + ec.message());
    removed.push_back(f.dir);
  }
  if (!removed.empty()) RETURN_IF_ERROR(FsyncPath(root));
  return removed;
}

}  // namespace ecps
