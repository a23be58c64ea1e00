// ScrubManager: the coordinator's scrubs (an admin's, and the final one of a mode with
// parity) and the last report, behind a lock of its own.
//
// It owns the scrubber the owner installs, the final scrub's bookkeeping (final_scrub.h) and
// the last report (Status shows it), and runs the scrub's RPCs outside every lock. It asks
// MembershipManager whether a scrub may run and tells it the outcome (the job finishes, or
// fails on a mismatch).
//
// Its lock is a leaf of the coordinator's order (coordinator_service.h): held only for a few
// lines, never while calling another manager; MembershipManager's hooks take it under theirs.
#ifndef ECPS_COORDINATOR_SCRUB_MANAGER_H_
#define ECPS_COORDINATOR_SCRUB_MANAGER_H_

#include <functional>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/final_scrub.h"
#include "coordinator/membership_manager.h"
#include "proto/ecps.pb.h"

namespace ecps {
namespace v1 {
class CoordinatorState;
}  // namespace v1

class ScrubManager {
 public:
  // CoordinatorService::Scrubber.
  using Scrubber = std::function<v1::ScrubReport(const v1::ClusterMap& map)>;

  // `final_wanted`: the mode has parity, so the job ends with a scrub when it can scrub.
  // `membership` must outlive the manager.
  ScrubManager(bool final_wanted, MembershipManager* membership);
  ScrubManager(const ScrubManager&) = delete;
  ScrubManager& operator=(const ScrubManager&) = delete;

  void SetScrubber(Scrubber scrubber) ABSL_LOCKS_EXCLUDED(mu_);
  // CoordinatorService::Scrub after authentication (same contract).
  absl::Status Scrub(v1::ScrubReport* report) ABSL_LOCKS_EXCLUDED(mu_);
  // CoordinatorService::RunPendingScrub.
  void RunPendingScrub() ABSL_LOCKS_EXCLUDED(mu_);

  // The phase machine's facts (MembershipManager::Hooks): a final scrub is configured (a
  // scrubber, a mode with parity) and not run yet; every worker is done, so it may run now.
  bool FinalWanted() const ABSL_LOCKS_EXCLUDED(mu_);
  void RequestFinal() ABSL_LOCKS_EXCLUDED(mu_);

  // Its part of the saved state (the last report), and back.
  void Save(v1::CoordinatorState* state) const ABSL_LOCKS_EXCLUDED(mu_);
  void Restore(const v1::CoordinatorState& state) ABSL_LOCKS_EXCLUDED(mu_);
  // The last report into a Status response.
  void FillStatus(v1::StatusResponse* response) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Keeps `report` as the last one and saves the state; with `final_verdict`, also records
  // the final scrub and sets what it concluded.
  void Record(const v1::ScrubReport& report, absl::Status* final_verdict)
      ABSL_LOCKS_EXCLUDED(mu_);

  MembershipManager* const membership_;
  mutable absl::Mutex mu_;
  Scrubber scrubber_ ABSL_GUARDED_BY(mu_);
  FinalScrub final_scrub_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<v1::ScrubReport> last_scrub_ ABSL_GUARDED_BY(mu_);  // null: none yet
};

}  // namespace ecps

#endif  // ECPS_COORDINATOR_SCRUB_MANAGER_H_
