// FailureHistory: every node failure of a job and how it was recovered, for Status and the
// final report.
//
// One FailureEvent per death, keyed by the slot (role, logical id) that failed:
//   Declared   the failure detector declared the instance dead       -> FAILURE_DETECTED
//   Replaced   a spare was promoted or a new process took the id     -> FAILURE_REPLACING
//   Progress   the replacement server's rebuild stats (rows, rate)
//   Recovered  the replacement server reports ACTIVE, or the
//              replacement worker completed a step                   -> FAILURE_RECOVERED
// Replaced, Progress and Recovered apply to every open (not recovered) event of the slot, so
// a replacement that dies during its own recovery leaves two events that close together when
// the next replacement finishes.
//
// Not thread-safe: the owner (FailureManager) serialises calls under its lock. Times are
// passed in by the owner (its injected clock).
#ifndef ECPS_COORDINATOR_FAILURE_HISTORY_H_
#define ECPS_COORDINATOR_FAILURE_HISTORY_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "proto/ecps.pb.h"
#include "runtime/spec.h"

namespace ecps {

class FailureHistory {
 public:
  // `row_payload_bytes`: bytes of one embedding row's payload (weights and optimizer state),
  // for the rebuild rate in MB/s; 0 leaves the rate unset.
  explicit FailureHistory(int64_t row_payload_bytes = 0) : row_bytes_(row_payload_bytes) {}

  void Declared(v1::Role role, int id, const std::string& instance, int64_t pid,
                absl::Time last_heartbeat, absl::Time now, const std::string& reason);
  void Replaced(v1::Role role, int id, const std::string& instance, int64_t pid, bool by_spare,
                absl::Time now);
  void Progress(int server_id, const v1::ServerStats& stats);
  // Returns whether an open event of the slot was closed.
  bool Recovered(v1::Role role, int id, absl::Time now);

  // Whether the slot has an event that is not recovered yet.
  bool Open(v1::Role role, int id) const;
  const std::vector<v1::FailureEvent>& events() const { return events_; }
  // A takeover: the events a previous coordinator saved (events()).
  void Restore(std::vector<v1::FailureEvent> events) { events_ = std::move(events); }
  void Fill(v1::StatusResponse* out) const;

 private:
  const int64_t row_bytes_;
  std::vector<v1::FailureEvent> events_;
};

// Bytes of one embedding row's payload: dim weights plus the sparse optimizer's state (adagrad:
// dim accumulators, rowwise_adagrad: one, sgd: none), as float32.
int64_t RowPayloadBytes(int embedding_dim, SparseOptimizerType sparse_optimizer);

}  // namespace ecps

#endif  // ECPS_COORDINATOR_FAILURE_HISTORY_H_
