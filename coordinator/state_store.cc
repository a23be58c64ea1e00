#include "coordinator/state_store.h"

#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/state_log.h"
#include "spdlog/spdlog.h"

namespace ecps {
namespace {

// The state is small (one entry per node and failure): each save is a whole snapshot, and the
// log's records stay unused.
class FileStateStore : public StateStore {
 public:
  FileStateStore(std::unique_ptr<StateLog> log, StateLogOptions options)
      : dir_(log->dir()), options_(options), log_(std::move(log)) {}

  absl::StatusOr<std::optional<std::string>> Load() override {
    absl::MutexLock lock(&mu_);
    if (log_ == nullptr) return absl::FailedPreconditionError(dir_ + ": the state log is closed");
    absl::StatusOr<StateLogContents> contents = log_->Load();
    if (!contents.ok()) return contents.status();
    return std::move(contents->snapshot);
  }

  // A failed write leaves the log refusing every later one until it is reopened (which
  // settles what reached the disk): it is reopened here and the save tried once more, so one
  // failed fsync does not stop every save after it for the rest of the coordinator's life.
  absl::Status Save(absl::string_view state) override {
    absl::MutexLock lock(&mu_);
    absl::Status saved = log_ != nullptr
                             ? log_->WriteSnapshot(state)
                             : absl::FailedPreconditionError(dir_ + ": the state log is closed");
    if (saved.ok()) return saved;
    log_.reset();  // releases the folder's lock, which Open takes again
    absl::StatusOr<std::unique_ptr<StateLog>> reopened = StateLog::Open(dir_, options_);
    if (!reopened.ok()) {
      return absl::Status(saved.code(), absl::StrCat(saved.message(), "; reopening the log: ",
                                                      reopened.status().message()));
    }
    log_ = *std::move(reopened);
    absl::Status retried = log_->WriteSnapshot(state);
    if (retried.ok()) {
      spdlog::warn("coordinator: a save of its state failed ({}); saved after reopening {}",
                   saved.ToString(), dir_);
    }
    return retried;
  }
  std::string Describe() const override { return "the state log in " + dir_; }

 private:
  const std::string dir_;
  const StateLogOptions options_;
  absl::Mutex mu_;
  std::unique_ptr<StateLog> log_ ABSL_GUARDED_BY(mu_);  // null: it could not be reopened
};

}  // namespace

absl::StatusOr<std::unique_ptr<StateStore>> OpenFileStateStore(const std::string& dir,
                                                              StateLogOptions options) {
  absl::StatusOr<std::unique_ptr<StateLog>> log = StateLog::Open(dir, options);
  if (!log.ok()) return log.status();
  return std::unique_ptr<StateStore>(new FileStateStore(*std::move(log), options));
}

}  // namespace ecps
