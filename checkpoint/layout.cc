#include "checkpoint/layout.h"

#include <filesystem>
#include <regex>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "checkpoint/manifest.h"
#include "checkpoint/reader.h"
#include "checkpoint/store.h"
#include "kernels/dlrm.h"
#include "kernels/optimizers.h"
#include "domain/spec_config.h"

namespace ecps {
namespace fs = std::filesystem;

absl::StatusOr<CheckpointLayout> CheckpointLayoutFor(const JobSpec& spec, int64_t step) {
  auto model = Dlrm::Create(ToDlrmConfig(spec.model), 1);
  if (!model.ok()) return model.status();
  CheckpointLayout layout;
  layout.job = spec.job.name;
  layout.step = step;
  layout.dim = spec.model.embedding_dim;
  layout.payload_floats =
      spec.model.embedding_dim + SparseStateFloats(ToSparseOptimizerConfig(spec.optimizer.sparse),
                                                         spec.model.embedding_dim);
  layout.sparse_optimizer = ToString(spec.optimizer.sparse.type);
  layout.dense_optimizer = ToString(spec.optimizer.dense.type);
  layout.table_rows = spec.model.table_rows;
  for (const DenseTensorInfo& t : (*model)->tensors()) {
    layout.dense_sizes.push_back(t.size);
    layout.dense_state_floats.push_back(DenseStateFloats(ToDenseOptimizerConfig(spec.optimizer.dense), t.size));
  }
  return layout;
}

absl::StatusOr<std::string> ResolveCheckpointDir(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    return absl::NotFoundError(absl::StrCat(path, ": no such checkpoint directory"));
  }
  static const std::regex kStep("step-[0-9]+");
  static const std::regex kFile("(table-[0-9]+\\.rows|dense-[0-9]+\\.bin|MANIFEST\\.json)");
  bool is_checkpoint = std::regex_match(fs::path(path).filename().string(), kStep);
  for (const auto& entry : fs::directory_iterator(path, ec)) {
    if (std::regex_match(entry.path().filename().string(), kFile)) is_checkpoint = true;
  }
  if (is_checkpoint) {
    if (!fs::exists(fs::path(path) / "MANIFEST.json", ec)) {
      return absl::NotFoundError(
          absl::StrCat((fs::path(path) / "MANIFEST.json").string(), ": missing"));
    }
    return path;
  }
  return LatestCheckpoint(path);
}

absl::StatusOr<Manifest> OpenResumeCheckpoint(const JobSpec& spec, bool verify) {
  auto dir = ResolveCheckpointDir(spec.job.resume_from);
  if (!dir.ok()) return dir.status();
  auto manifest = ReadManifest(*dir);
  if (!manifest.ok()) return manifest.status();
  auto layout = CheckpointLayoutFor(spec);
  if (!layout.ok()) return layout.status();
  if (absl::Status s = CheckLayoutMatches(*manifest, *layout); !s.ok()) return s;
  if (verify) {
    if (absl::Status s = VerifyCheckpoint(*dir); !s.ok()) return s;
  }
  return manifest;
}

}  // namespace ecps
