// The scrub at the end of a job in a mode with parity (erasure_code, replication): when
// every worker is done the job waits for it instead of finishing, and a mismatch fails the
// job. Bookkeeping only; the coordinator service runs the scrub outside its lock once no
// server recovers. Not thread-safe: the owner serialises every call.
#ifndef ECPS_COORDINATOR_FINAL_SCRUB_H_
#define ECPS_COORDINATOR_FINAL_SCRUB_H_

#include <string>

#include "absl/status/status.h"
#include "proto/ecps.pb.h"

namespace ecps {

class FinalScrub {
 public:
  // `wanted`: the mode has parity and the coordinator can scrub.
  explicit FinalScrub(bool wanted) : wanted_(wanted) {}

  bool wanted() const { return wanted_ && !done_; }
  bool pending() const { return pending_; }
  void Request() { pending_ = wanted(); }

  // Records that the final scrub ran; OK when `report` is clean, else FAILED_PRECONDITION
  // with what the job fails with (the mismatch counts, or the scrub's own error).
  absl::Status Finish(const v1::ScrubReport& report);

  // One log line for a scrub report.
  static std::string Summary(const v1::ScrubReport& report);

 private:
  bool wanted_;
  bool pending_ = false;
  bool done_ = false;
};

}  // namespace ecps

#endif  // ECPS_COORDINATOR_FINAL_SCRUB_H_
