// FailureManager: what the coordinator knows of node failures, behind a lock of its own.
//
// It owns the failure detector (heartbeat deadlines, suspicions, deafness), the failure
// history (every death and its recovery, for Status), the step each replacement worker
// resumes after, the kills an admin asked for, the ServerDeadHandler, and the data-loss
// check (which stripes lost more than r members). It decides; the membership table is
// MembershipManager's, which calls this one when a node registers, heartbeats or dies.
//
// Thread-safe. A leaf of the coordinator's lock order (coordinator_service.h): it never calls
// another manager, and it runs neither the ServerDeadHandler nor the process probe under its
// lock (it hands them out).
#ifndef ECPS_COORDINATOR_FAILURE_MANAGER_H_
#define ECPS_COORDINATOR_FAILURE_MANAGER_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "runtime/clock.h"
#include "coordinator/failure_detector.h"
#include "coordinator/failure_history.h"
#include "coordinator/membership.h"
#include "proto/ecps.pb.h"
#include "domain/placement.h"

namespace ecps {
namespace v1 {
class CoordinatorState;
}  // namespace v1

class FailureManager {
 public:
  // See CoordinatorService::ServerDeadHandler.
  using ServerDeadHandler = std::function<bool(int server_id)>;
  // True when the process at `address` is surely gone (process_probe.h).
  using ProcessGone = std::function<bool(const std::string& address)>;

  struct Options {
    FailureDetector::Options detector;
    // Bytes of one row's payload, for the rebuild rate in the history (0: no rate).
    int64_t row_payload_bytes = 0;
    // Unset: the spec had no tables (no data-loss check).
    std::optional<Placement> placement;
    bool keeps_redundancy = false;  // a mode with parity: a lost stripe is data loss
    int r = 0;
    ProcessGone process_gone;  // empty: reports wait for the suspicion timeout
  };

  // `clock` must outlive the manager.
  FailureManager(const Clock* clock, Options options);
  FailureManager(const FailureManager&) = delete;
  FailureManager& operator=(const FailureManager&) = delete;

  // --- Registration and heartbeats (MembershipManager calls these under its lock) ---
  // A registration that changed the table (not a repeated one): watches the new instance,
  // forgets the one it replaced, and records a replacement in the history (a worker's resume
  // step with it). `epoch`: the map's epoch after it, for the log.
  void Registered(const Membership::Registration& reg, int64_t pid, uint64_t epoch)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A standby spare now holds dead server `server_id`'s slot (Membership::PromoteSpare).
  void SparePromoted(int server_id, const Membership::Registration& promoted, uint64_t epoch)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Worker `id` replaced a dead worker and resumes after a step (a retried registration gets
  // the same resume point back).
  bool Resumes(int worker) const ABSL_LOCKS_EXCLUDED(mu_);
  // A heartbeat the table accepted (not fenced): records it, the rebuild progress of a
  // replacement server, and closes a recovered slot's failure events. A worker that became
  // done is no longer watched (it may exit before the job ends).
  void Heartbeat(const Membership::HeartbeatResult& result, const v1::HeartbeatRequest& request)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A worker's heartbeat says it computes wrongly (worker.abft_max_detections): it is
  // declared dead at the next check, as a worker whose process is gone would be, with `why`.
  void NoteUnhealthy(const NodeRef& node, const std::string& why) ABSL_LOCKS_EXCLUDED(mu_);
  // Starts watching `instance`, its deadline `grace` after now (a takeover's).
  void Track(const std::string& instance, absl::Duration grace) ABSL_LOCKS_EXCLUDED(mu_);

  // --- Kills (ecps kill) ---
  void RequestKill(const std::string& instance) ABSL_LOCKS_EXCLUDED(mu_);
  bool KillRequested(const std::string& instance) const ABSL_LOCKS_EXCLUDED(mu_);

  // --- Detection ---
  // A peer reported `instance` failed: true when it is watched, live and now suspected.
  bool Suspect(const std::string& instance) ABSL_LOCKS_EXCLUDED(mu_);
  bool IsSuspected(const std::string& instance) const ABSL_LOCKS_EXCLUDED(mu_);
  // The suspected instance's process is gone (FailureDetector::Gone).
  bool Gone(const std::string& instance) ABSL_LOCKS_EXCLUDED(mu_);
  // Every watched node past its deadline now, each once (FailureDetector::Check).
  std::vector<FailureDetector::Death> Check() ABSL_LOCKS_EXCLUDED(mu_);
  // `node` was declared dead (the table marked it) after `death`: records it in the history
  // (a server's slot, a worker that was not done) and drops its kill request and resume step.
  // Returns the log line's text: "server 2 at h:p (instance i) declared dead: <reason>".
  std::string Declared(const NodeRef& node, const FailureDetector::Death& death)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Nobody could be heard for `duration` (`why`): every deadline moves on by it, with a log
  // line when it is a good part of a timeout.
  void Deaf(absl::Duration duration, const char* why) ABSL_LOCKS_EXCLUDED(mu_);
  std::optional<absl::Duration> SinceHeartbeat(const std::string& instance) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Whether suspected servers may be probed (options.process_gone is set), and the probe.
  bool probes() const { return static_cast<bool>(options_.process_gone); }
  bool ProcessGoneAt(const std::string& address) const;

  // In a mode with parity, when more than r members of some stripes are gone (dead, or a
  // replacement not rebuilt yet) in `map`: the data-loss message naming them; else "".
  std::string DataLoss(const v1::ClusterMap& map) const;

  void SetServerDeadHandler(ServerDeadHandler handler) ABSL_LOCKS_EXCLUDED(mu_);
  // A copy, to run without any lock held.
  ServerDeadHandler server_dead_handler() const ABSL_LOCKS_EXCLUDED(mu_);

  // --- State and status ---
  // Its part of the saved state: the history, resume steps and kill requests.
  void Save(v1::CoordinatorState* state) const ABSL_LOCKS_EXCLUDED(mu_);
  // A takeover: that part back (the detector's deadlines come from Track).
  void Restore(const v1::CoordinatorState& state) ABSL_LOCKS_EXCLUDED(mu_);
  // The failure history into a Status response.
  void FillStatus(v1::StatusResponse* response) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const Clock* const clock_;
  const Options options_;
  mutable absl::Mutex mu_;
  FailureDetector detector_ ABSL_GUARDED_BY(mu_);
  FailureHistory history_ ABSL_GUARDED_BY(mu_);
  // Replacement workers: the step they resume after (recovered once they report beyond it).
  absl::flat_hash_map<int, int64_t> worker_resume_step_ ABSL_GUARDED_BY(mu_);
  // Instances an admin asked to die (Kill): told so in every heartbeat response.
  absl::flat_hash_set<std::string> kill_requested_ ABSL_GUARDED_BY(mu_);
  // Workers that reported themselves unhealthy, by instance: why, for the reason they are
  // declared dead with. Not saved: a worker repeats it in every heartbeat until it is fenced.
  absl::flat_hash_map<std::string, std::string> unhealthy_ ABSL_GUARDED_BY(mu_);
  ServerDeadHandler server_dead_handler_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ecps

#endif  // ECPS_COORDINATOR_FAILURE_MANAGER_H_
