// LeaderLease: electing the job's active coordinator in etcd (docs/recovery.md, "Standby
// coordinators"). The leader is whoever holds the job's leader key, created in a transaction
// only while the key is absent and attached to an etcd lease of ttl_s seconds that the leader
// keeps renewing. When the leader dies or is cut off from etcd its renewals stop, etcd lets
// the lease lapse and deletes the key, and a standby that polls the key creates it in turn.
//
// The leader's own view is bounded by time: a renewal sent at T and answered extends the
// lease, in etcd, to at least T + ttl. The leader counts itself leader only until
// T + ttl - margin (T of the last answered renewal), so it stops acting before etcd can hand
// the key to another, whatever happened to its renewals. Clock rates are assumed to agree
// within the margin (the lease is measured by etcd's leader, the margin by this host's
// monotonic clock). Writes that must not come from a deposed leader are additionally guarded
// in etcd by the key's value (EtcdStateStore), and everything the coordinator sends (heartbeat
// answers, cluster maps, its requests to the servers) carries its term, which servers and
// workers check (runtime/coordinator_term.h).
//
// Thread-safe. A LeaderLease campaigns once: after losing the lead, make a new one.
#ifndef ECPS_COORDINATOR_LEADER_LEASE_H_
#define ECPS_COORDINATOR_LEADER_LEASE_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/etcd_client.h"

namespace ecps {

struct LeaderLeaseOptions {
  std::string key;        // the job's leader key
  std::string candidate;  // who campaigns (its address): the key's value starts with it
  int64_t ttl_s = 2;      // the lease (etcd raises it to its minimum, 2 s by default)
  // How often a standby looks whether the key is gone.
  absl::Duration poll = absl::Milliseconds(100);
  // The leader stops counting itself leader this long before its lease can end; zero: a
  // quarter of the TTL.
  absl::Duration margin = absl::ZeroDuration();
  // Between renewals; zero: a quarter of the TTL.
  absl::Duration renew_every = absl::ZeroDuration();
};

class LeaderLease {
 public:
  // `etcd` must outlive this.
  LeaderLease(EtcdClient* etcd, LeaderLeaseOptions options);
  // Stops renewing and, when leading, revokes the lease (Resign).
  ~LeaderLease();
  LeaderLease(const LeaderLease&) = delete;
  LeaderLease& operator=(const LeaderLease&) = delete;

  // Blocks until this candidate holds the key (OK; it then renews the lease on a thread of its
  // own) or `stop` returns true (CANCELLED). `stop` is asked between attempts, every `poll`.
  // Etcd errors (no member answers, no quorum) are logged at most every 10 s and retried:
  // only `stop` ends the wait.
  absl::Status Campaign(const std::function<bool()>& stop);

  // True from a successful Campaign until the lead may be lost: no renewal answered within
  // ttl - margin of the last answered one, etcd said the lease is gone, or Depose or Resign
  // was called. Once false, never true again.
  bool leading() const;
  // Stops leading at once: a guarded write found the key no longer ours.
  void Depose(const std::string& why);
  // Stops leading and revokes the lease, so that a standby takes over without waiting for it
  // to lapse. Errors are logged (the lease then lapses by itself).
  void Resign();

  // Stops leading and renewing without revoking: the lease lapses by itself, so a standby
  // takes over only after the TTL (a coordinator whose job has ended leaves it to lapse, and
  // the launcher stops the standbys meanwhile).
  void Abandon();

  // What the key holds while it is ours: the candidate and the lease's id.
  std::string value() const;
  int64_t lease_id() const;

 private:
  using Clock = std::chrono::steady_clock;
  void RenewLoop();
  void Lose(const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StopRenewing();

  EtcdClient* const etcd_;
  const LeaderLeaseOptions options_;
  const absl::Duration margin_;
  const absl::Duration renew_every_;

  mutable absl::Mutex mu_;
  bool leading_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  Clock::time_point valid_until_ ABSL_GUARDED_BY(mu_);
  int64_t lease_ ABSL_GUARDED_BY(mu_) = 0;
  std::string value_ ABSL_GUARDED_BY(mu_);
  std::thread renewer_;
};

}  // namespace ecps

#endif  // ECPS_COORDINATOR_LEADER_LEASE_H_
