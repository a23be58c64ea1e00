#include "coordinator/state_store.h"

#include <utility>

#include "coordinator/state_log.h"

namespace ecps {
namespace {

// The state is small (one entry per node and failure): each save is a whole snapshot, and the
// log's records stay unused.
class FileStateStore : public StateStore {
 public:
  explicit FileStateStore(std::unique_ptr<StateLog> log) : log_(std::move(log)) {}

  absl::StatusOr<std::optional<std::string>> Load() override {
    absl::StatusOr<StateLogContents> contents = log_->Load();
    if (!contents.ok()) return contents.status();
    return std::move(contents->snapshot);
  }
  absl::Status Save(absl::string_view state) override { return log_->WriteSnapshot(state); }
  std::string Describe() const override { return "the state log in " + log_->dir(); }

 private:
  const std::unique_ptr<StateLog> log_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<StateStore>> OpenFileStateStore(const std::string& dir) {
  absl::StatusOr<std::unique_ptr<StateLog>> log = StateLog::Open(dir);
  if (!log.ok()) return log.status();
  return std::unique_ptr<StateStore>(new FileStateStore(*std::move(log)));
}

}  // namespace ecps
