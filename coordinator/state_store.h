// StateStore: where the coordinator keeps its durable state (proto/coordinator_state.proto),
// the whole of it as one value that each save replaces. Two implementations, chosen by
// coordinator.state_store (docs/recovery.md): the state log in a folder of the job's
// (OpenFileStateStore, the embedded default) and a key in etcd written only while this
// coordinator holds the job's leader lease (EtcdStateStore, etcd_state_store.h).
//
// Thread-safety is the implementation's; both here are thread-safe.
#ifndef ECPS_COORDINATOR_STATE_STORE_H_
#define ECPS_COORDINATOR_STATE_STORE_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "coordinator/state_log.h"

namespace ecps {

class StateStore {
 public:
  virtual ~StateStore() = default;
  // The last state saved (opaque bytes), nullopt before the first save. DATA_LOSS when it is
  // there but damaged; other codes when the store cannot be read.
  virtual absl::StatusOr<std::optional<std::string>> Load() = 0;
  // Replaces the state, durably, before returning OK. An error means it may or may not have
  // been replaced. FAILED_PRECONDITION: this coordinator may no longer write here (another
  // took the job over); every later Save fails the same way.
  virtual absl::Status Save(absl::string_view state) = 0;
  // For logs and errors: "the state log in DIR", "etcd key K".
  virtual std::string Describe() const = 0;
};

// The state log (state_log.h) in `dir`, created if missing; its snapshot is the state. Errors
// as StateLog::Open's (FAILED_PRECONDITION while another process holds the folder). A save
// that fails reopens the log and is tried once more (a failed write stops the log otherwise).
absl::StatusOr<std::unique_ptr<StateStore>> OpenFileStateStore(const std::string& dir,
                                                              StateLogOptions options = {});

}  // namespace ecps

#endif  // ECPS_COORDINATOR_STATE_STORE_H_
