// The highest coordinator term a process has seen (docs/recovery.md, "Fencing a deposed
// coordinator"). A coordinator's term is 1 for the one that started the job and grows by one
// per takeover; everything it sends carries it (heartbeat answers, cluster maps, its requests
// to the servers). A message of a lower term than the highest seen is a deposed
// coordinator's and is refused.
#ifndef ECPS_RUNTIME_COORDINATOR_TERM_H_
#define ECPS_RUNTIME_COORDINATOR_TERM_H_

#include <atomic>
#include <cstdint>

#include "absl/status/status.h"

namespace ecps {

// Thread-safe.
class CoordinatorTermFence {
 public:
  // Remembers `term` and returns OK when it is at least the highest seen (0, no term given,
  // is always accepted and changes nothing); FAILED_PRECONDITION naming both terms otherwise.
  absl::Status Check(uint64_t term);
  uint64_t highest() const { return highest_.load(); }

 private:
  std::atomic<uint64_t> highest_{0};
};

}  // namespace ecps

#endif  // ECPS_RUNTIME_COORDINATOR_TERM_H_
