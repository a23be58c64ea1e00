// Failure detector: decides, from heartbeat times and peer reports, when a node is dead.
//
// A node is identified by its instance string (unique per process incarnation). It is
// declared dead when
//   - its last heartbeat is older than `heartbeat_timeout`, or
//   - a peer reported it (Suspect) and its last heartbeat is older than the shorter
//     `suspicion_timeout`: a report alone never kills a node that keeps heartbeating, and a
//     heartbeat received after a report clears the suspicion, or
//   - a peer reported it and its process is known to be gone (Gone: its address refuses
//     connections), at once.
// Once declared dead a node stays dead (Check never reports it again) until Forget/Track.
//
// Time in which the coordinator itself could hear nobody (Deaf: its state being written
// under its lock, its threads not scheduled) is not held against the nodes: every deadline
// moves on by it. Otherwise a coordinator stalled for longer than the timeout would declare
// every node dead at once when it wakes, and end the job for data loss nobody had.
//
// Not thread-safe: the owner (FailureManager) serialises calls under its own lock.
#ifndef ECPS_COORDINATOR_FAILURE_DETECTOR_H_
#define ECPS_COORDINATOR_FAILURE_DETECTOR_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "runtime/clock.h"

namespace ecps {

class FailureDetector {
 public:
  struct Options {
    absl::Duration heartbeat_timeout = absl::Milliseconds(1500);
    absl::Duration suspicion_timeout = absl::Milliseconds(500);  // < heartbeat_timeout
  };

  // A node that Check declared dead.
  struct Death {
    std::string node;
    absl::Duration silence;  // time since its last heartbeat
    bool reported;           // a peer had reported it (the suspicion timeout applied)
    bool gone;               // and its address refused connections (no timeout waited)
  };

  // `clock` must outlive the detector.
  FailureDetector(const Clock* clock, Options options);

  // Starts (or restarts) watching `node`, counting now as a heartbeat; clears any suspicion
  // or death verdict of that node.
  // `grace`: its heartbeat timeout runs from now + grace (a takeover's start), heartbeats
  // or not.
  void Track(const std::string& node, absl::Duration grace = absl::ZeroDuration());
  // Whether `node` is watched and not declared dead.
  bool IsLive(const std::string& node) const;
  // Stops watching `node` (a finished worker, a replaced instance). No-op when unknown.
  void Forget(const std::string& node);

  // Records a heartbeat now and clears any suspicion. Returns false (and records nothing)
  // when `node` is not tracked or was already declared dead.
  bool Heartbeat(const std::string& node);
  // A peer reports `node` failed. Returns false when it is not tracked or already dead.
  bool Suspect(const std::string& node);
  // A suspected `node`'s process is gone: the next Check declares it dead. Returns false
  // (and records nothing) unless `node` is tracked, suspected and not dead; a heartbeat
  // afterwards clears it with the suspicion.
  bool Gone(const std::string& node);

  // The coordinator could hear nobody for the last `duration`: every live node's deadline
  // (its heartbeat timeout, its suspicion timeout) moves on by it. No-op when not positive.
  void Deaf(absl::Duration duration);
  // The deafness noted so far, in all (for the coordinator's log and tests).
  absl::Duration deaf_total() const { return deaf_total_; }

  // Declares dead every live node past its deadline at the clock's current time, and
  // returns those (each only once).
  std::vector<Death> Check();

  bool IsSuspected(const std::string& node) const;
  bool IsDead(const std::string& node) const;
  // Time since the node's last heartbeat, or since Track (also for dead nodes); nullopt when
  // not tracked.
  std::optional<absl::Duration> SinceHeartbeat(const std::string& node) const;

  const Options& options() const { return options_; }

 private:
  struct Entry {
    absl::Time last_heartbeat;  // or when Track was called
    absl::Time counted_from;    // where its timeouts run from: grace and deafness added
    bool suspected = false;
    bool dead = false;
    bool gone = false;
  };

  const Clock* const clock_;
  const Options options_;
  absl::flat_hash_map<std::string, Entry> nodes_;
  absl::Duration deaf_total_;
};

}  // namespace ecps

#endif  // ECPS_COORDINATOR_FAILURE_DETECTOR_H_
