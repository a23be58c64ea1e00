#include "runtime/fault_injection_env.h"

#include <iterator>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "runtime/posix_file.h"
#include "runtime/status_macros.h"

namespace ecps {

class FaultInjectionWritableFile : public WritableFile {
 public:
  FaultInjectionWritableFile(FaultInjectionEnv* env, std::unique_ptr<WritableFile> base)
      : env_(env), base_(std::move(base)) {}

  absl::Status Append(absl::string_view data) override {
    ASSIGN_OR_RETURN(FaultInjectionEnv::AppendPlan plan,
                     env_->BeginAppend(path(), static_cast<int64_t>(data.size())));
    RETURN_IF_ERROR(base_->Append(data.substr(0, static_cast<size_t>(plan.bytes))));
    if (!plan.torn) return absl::OkStatus();
    return env_->EndTornAppend(path(), plan, static_cast<int64_t>(data.size()));
  }
  absl::Status Truncate(int64_t size) override {
    RETURN_IF_ERROR(env_->BeginOperation(path()));
    return base_->Truncate(size);
  }
  absl::Status Allocate(int64_t size) override {
    RETURN_IF_ERROR(env_->BeginOperation(path()));
    return base_->Allocate(size);
  }
  absl::Status Sync() override {
    RETURN_IF_ERROR(env_->BeginSync(path()));
    RETURN_IF_ERROR(base_->Sync());
    return env_->RecordSynced(path());
  }
  absl::Status Close() override {
    RETURN_IF_ERROR(env_->BeginOperation(path()));
    return base_->Close();
  }
  const std::string& path() const override { return base_->path(); }

 private:
  FaultInjectionEnv* const env_;
  const std::unique_ptr<WritableFile> base_;
};

class FaultInjectionMappedFile : public MappedFile {
 public:
  FaultInjectionMappedFile(FaultInjectionEnv* env, std::unique_ptr<MappedFile> base)
      : env_(env), base_(std::move(base)) {}

  char* data() override { return base_->data(); }
  int64_t size() const override { return base_->size(); }
  absl::Status Sync() override {
    RETURN_IF_ERROR(env_->BeginSync(path()));
    RETURN_IF_ERROR(base_->Sync());
    return env_->RecordSynced(path());
  }
  absl::Status Close() override {
    RETURN_IF_ERROR(env_->BeginOperation(path()));
    return base_->Close();
  }
  const std::string& path() const override { return base_->path(); }

 private:
  FaultInjectionEnv* const env_;
  const std::unique_ptr<MappedFile> base_;
};

namespace {

// Counts down `*countdown` (0: disarmed); true when it reaches its target now.
bool Due(int* countdown) {
  if (*countdown <= 0) return false;
  return --*countdown == 0;
}

absl::Status DeadError(const std::string& path) {
  return FileError(absl::StatusCode::kInternal, path, "the writer is dead (simulated crash)");
}

// Whether `path` is `root` or lies under it.
bool IsUnder(const std::string& path, const std::string& root) {
  return path == root || absl::StartsWith(path, root + "/");
}

}  // namespace

void FaultInjectionEnv::FailSync(int n) {
  absl::MutexLock lock(&mu_);
  sync_countdown_ = n;
}

void FaultInjectionEnv::TearWrite(int n, AfterTear after) {
  absl::MutexLock lock(&mu_);
  tear_countdown_ = n;
  tear_after_ = after;
}

void FaultInjectionEnv::CrashAt(int n) {
  absl::MutexLock lock(&mu_);
  crash_countdown_ = n;
}

void FaultInjectionEnv::Crash() {
  absl::MutexLock lock(&mu_);
  crashed_ = true;
}

bool FaultInjectionEnv::crashed() const {
  absl::MutexLock lock(&mu_);
  return crashed_;
}

int FaultInjectionEnv::syncs() const {
  absl::MutexLock lock(&mu_);
  return syncs_;
}

int FaultInjectionEnv::appends() const {
  absl::MutexLock lock(&mu_);
  return appends_;
}

int FaultInjectionEnv::operations() const {
  absl::MutexLock lock(&mu_);
  return operations_;
}

absl::Status FaultInjectionEnv::DropUnsyncedData() {
  absl::MutexLock lock(&mu_);
  for (const auto& [path, durable] : durable_) {
    ASSIGN_OR_RETURN(FileKind kind, base_->GetFileKind(path));
    if (kind != FileKind::kFile) continue;  // removed (or replaced by a directory) since
    ASSIGN_OR_RETURN(std::string now, base_->ReadFile(path));
    if (now == durable) continue;
    ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, base_->NewWritableFile(path));
    RETURN_IF_ERROR(file->Append(durable));
    RETURN_IF_ERROR(file->Close());
  }
  return absl::OkStatus();
}

absl::Status FaultInjectionEnv::CheckAlive(const std::string& path) const {
  absl::MutexLock lock(&mu_);
  return crashed_ ? DeadError(path) : absl::OkStatus();
}

absl::Status FaultInjectionEnv::BeginOperation(const std::string& path) {
  absl::MutexLock lock(&mu_);
  if (crashed_) return DeadError(path);
  ++operations_;
  if (Due(&crash_countdown_)) {
    crashed_ = true;
    return DeadError(path);
  }
  return absl::OkStatus();
}

absl::Status FaultInjectionEnv::BeginSync(const std::string& path) {
  RETURN_IF_ERROR(BeginOperation(path));
  absl::MutexLock lock(&mu_);
  ++syncs_;
  if (Due(&sync_countdown_)) {
    return FileError(absl::StatusCode::kInternal, path, "fsync failed: injected fault");
  }
  return absl::OkStatus();
}

absl::StatusOr<FaultInjectionEnv::AppendPlan> FaultInjectionEnv::BeginAppend(
    const std::string& path, int64_t bytes) {
  RETURN_IF_ERROR(BeginOperation(path));
  absl::MutexLock lock(&mu_);
  ++appends_;
  AppendPlan plan;
  plan.bytes = bytes;
  if (Due(&tear_countdown_)) {
    plan.bytes = bytes / 2;
    plan.torn = true;
    plan.after = tear_after_;
  }
  return plan;
}

absl::Status FaultInjectionEnv::EndTornAppend(const std::string& path, const AppendPlan& plan,
                                              int64_t of) {
  absl::MutexLock lock(&mu_);
  if (plan.after == AfterTear::kCrash) {
    crashed_ = true;
    return DeadError(path);
  }
  return FileError(absl::StatusCode::kInternal, path,
                   absl::StrCat("write failed: injected torn write (", plan.bytes, " of ", of,
                                " bytes written)"));
}

absl::Status FaultInjectionEnv::RecordSynced(const std::string& path) {
  ASSIGN_OR_RETURN(std::string now, base_->ReadFile(path));
  absl::MutexLock lock(&mu_);
  durable_[path] = std::move(now);
  return absl::OkStatus();
}

absl::Status FaultInjectionEnv::Track(const std::string& path, bool is_new) {
  if (is_new) {
    absl::MutexLock lock(&mu_);
    durable_[path].clear();
    return absl::OkStatus();
  }
  {
    absl::MutexLock lock(&mu_);
    if (durable_.count(path) > 0) return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(std::string now, base_->ReadFile(path));
  absl::MutexLock lock(&mu_);
  durable_.emplace(path, std::move(now));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<WritableFile>> FaultInjectionEnv::NewWritableFile(
    const std::string& path) {
  RETURN_IF_ERROR(BeginOperation(path));
  ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, base_->NewWritableFile(path));
  RETURN_IF_ERROR(Track(path, /*is_new=*/true));
  return std::make_unique<FaultInjectionWritableFile>(this, std::move(file));
}

absl::StatusOr<std::unique_ptr<WritableFile>> FaultInjectionEnv::NewAppendableFile(
    const std::string& path) {
  RETURN_IF_ERROR(BeginOperation(path));
  ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, base_->NewAppendableFile(path));
  RETURN_IF_ERROR(Track(path, /*is_new=*/false));
  return std::make_unique<FaultInjectionWritableFile>(this, std::move(file));
}

absl::StatusOr<std::unique_ptr<MappedFile>> FaultInjectionEnv::NewMappedFile(
    const std::string& path, int64_t size) {
  RETURN_IF_ERROR(BeginOperation(path));
  ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, base_->NewMappedFile(path, size));
  RETURN_IF_ERROR(Track(path, /*is_new=*/false));
  return std::make_unique<FaultInjectionMappedFile>(this, std::move(file));
}

absl::Status FaultInjectionEnv::SyncPath(const std::string& path) {
  RETURN_IF_ERROR(BeginSync(path));
  RETURN_IF_ERROR(base_->SyncPath(path));
  ASSIGN_OR_RETURN(FileKind kind, base_->GetFileKind(path));
  return kind == FileKind::kFile ? RecordSynced(path) : absl::OkStatus();
}

absl::Status FaultInjectionEnv::RenameFile(const std::string& from, const std::string& to) {
  RETURN_IF_ERROR(BeginOperation(to));
  RETURN_IF_ERROR(base_->RenameFile(from, to));
  absl::MutexLock lock(&mu_);
  std::map<std::string, std::string> moved;
  for (auto it = durable_.begin(); it != durable_.end();) {
    if (IsUnder(it->first, to)) {
      it = durable_.erase(it);  // replaced
    } else if (IsUnder(it->first, from)) {
      moved.emplace(to + it->first.substr(from.size()), std::move(it->second));
      it = durable_.erase(it);
    } else {
      ++it;
    }
  }
  durable_.merge(moved);
  return absl::OkStatus();
}

absl::Status FaultInjectionEnv::RemoveFile(const std::string& path) {
  RETURN_IF_ERROR(BeginOperation(path));
  RETURN_IF_ERROR(base_->RemoveFile(path));
  absl::MutexLock lock(&mu_);
  durable_.erase(path);
  return absl::OkStatus();
}

absl::Status FaultInjectionEnv::RemoveAll(const std::string& path) {
  RETURN_IF_ERROR(BeginOperation(path));
  RETURN_IF_ERROR(base_->RemoveAll(path));
  absl::MutexLock lock(&mu_);
  for (auto it = durable_.begin(); it != durable_.end();) {
    it = IsUnder(it->first, path) ? durable_.erase(it) : std::next(it);
  }
  return absl::OkStatus();
}

absl::Status FaultInjectionEnv::CreateDir(const std::string& path) {
  RETURN_IF_ERROR(BeginOperation(path));
  return base_->CreateDir(path);
}

absl::StatusOr<bool> FaultInjectionEnv::CreateDirs(const std::string& path) {
  RETURN_IF_ERROR(BeginOperation(path));
  return base_->CreateDirs(path);
}

absl::StatusOr<std::string> FaultInjectionEnv::ReadFile(const std::string& path) {
  RETURN_IF_ERROR(CheckAlive(path));
  return base_->ReadFile(path);
}

absl::StatusOr<int64_t> FaultInjectionEnv::GetFileSize(const std::string& path) {
  RETURN_IF_ERROR(CheckAlive(path));
  return base_->GetFileSize(path);
}

absl::StatusOr<FileKind> FaultInjectionEnv::GetFileKind(const std::string& path) {
  RETURN_IF_ERROR(CheckAlive(path));
  return base_->GetFileKind(path);
}

absl::StatusOr<std::vector<DirEntry>> FaultInjectionEnv::ListDir(const std::string& dir) {
  RETURN_IF_ERROR(CheckAlive(dir));
  return base_->ListDir(dir);
}

}  // namespace ecps
