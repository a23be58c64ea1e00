// The update gate of a parameter server: which updates may run now (freezes) and which are
// in flight. Thread-safe; time comes from an injected clock so that leases are testable.
//
// A freeze stops updates, whole-server (a scrub, a checkpoint, a dense restore) or of some
// stripes (a rebuild batch), and waits for the updates that started before it. Freezes are
// leases (docs/recovery.md, "Freezes are leases"): each has an id, an owner (a rebuilding
// server's instance, or the coordinator), the epoch it was taken in and an expiry. Only a
// release naming the same id and owner lifts one; ReleaseIf drops those whose owner the
// cluster map says is dead; an expired one no longer holds anything back. So a rebuilder
// that dies while it holds freezes cannot stop training for longer than its detection.
#ifndef ECPS_PS_UPDATE_GATE_H_
#define ECPS_PS_UPDATE_GATE_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "runtime/clock.h"

namespace ecps {

class UpdateGate {
 public:
  struct Lease {
    uint64_t id = 0;
    std::string owner;
    int owner_server = -1;  // -1: the coordinator
    uint64_t epoch = 0;     // the owner's epoch when it froze
    std::chrono::milliseconds duration{30000};
    // Empty: every update waits; else the stripes (keys from StripeKey) whose updates wait.
    std::vector<uint64_t> stripes;
  };

  static uint64_t StripeKey(int table, int64_t stripe) {
    return (static_cast<uint64_t>(table) << 40) + static_cast<uint64_t>(stripe);
  }

  // `clock` (not owned; it must outlive the gate) times leases and waits: a MonotonicClock in
  // production, so that a step of the wall clock neither lapses nor stretches a lease; a
  // FakeClock in tests. Waits (Begin, Freeze) wake at least every `poll` to notice leases
  // that ran out on a clock that tests move by hand.
  explicit UpdateGate(const Clock* clock,
                      std::chrono::milliseconds poll = std::chrono::milliseconds(50));

  // Whether an update touches a frozen stripe: calls `frozen` with the key of each stripe
  // it touches, and returns true at the first for which it is true.
  using Touches = std::function<bool(const std::function<bool(uint64_t key)>& frozen)>;

  // Waits while a live freeze covers the update (whole-server freezes cover every update;
  // stripe freezes those whose `touches` finds a frozen stripe; null: an update of no stripe,
  // such as a dense one),
  // for at most `timeout` (UNAVAILABLE), then counts it in flight. Returns the generation to
  // pass to End.
  absl::StatusOr<uint64_t> Begin(const Touches* touches, std::chrono::milliseconds timeout)
      ABSL_LOCKS_EXCLUDED(mu_);
  void End(uint64_t generation) ABSL_LOCKS_EXCLUDED(mu_);

  // Takes the lease and waits until the updates that started before it have finished
  // (DEADLINE_EXCEEDED after `timeout`; the lease is then dropped). Taking a lease the same
  // owner already holds (a retried request) renews it. ALREADY_EXISTS when another owner
  // holds that id.
  absl::Status Freeze(Lease lease, std::chrono::milliseconds timeout) ABSL_LOCKS_EXCLUDED(mu_);
  // Lifts the freeze `id` when `owner` holds it. A release repeated after it succeeded is
  // OK; PERMISSION_DENIED when someone else holds the id; FAILED_PRECONDITION when the
  // lease had run out or was dropped (the owner's consistent point was lost); NOT_FOUND for
  // an id never taken.
  absl::Status Release(uint64_t id, const std::string& owner) ABSL_LOCKS_EXCLUDED(mu_);

  // True when `owner` holds the live freeze `id` and it covers every key of `stripes`.
  bool Holds(uint64_t id, const std::string& owner, absl::Span<const uint64_t> stripes)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Drops every lease `dead` says is no longer its owner's; returns those dropped.
  std::vector<Lease> ReleaseIf(const std::function<bool(const Lease&)>& dead)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Leases dropped by expiry or ReleaseIf so far.
  int64_t expired() const ABSL_LOCKS_EXCLUDED(mu_);
  int active() const ABSL_LOCKS_EXCLUDED(mu_);  // live leases

 private:
  struct Held {
    Lease lease;
    absl::Time expiry;
  };
  // Drops expired leases and wakes the waiters.
  void ReapLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropLocked(std::unordered_map<uint64_t, Held>::iterator it, bool lapsed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool CoveredLocked(const Touches* touches) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Remembers how a lease ended, for a Release that comes after (bounded).
  void RememberLocked(uint64_t id, const std::string& owner, bool lapsed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Clock* const clock_;
  const std::chrono::milliseconds poll_;
  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  std::unordered_map<uint64_t, Held> leases_ ABSL_GUARDED_BY(mu_);
  // Key -> live leases covering it.
  std::unordered_map<uint64_t, int> stripe_frozen_ ABSL_GUARDED_BY(mu_);
  int whole_ ABSL_GUARDED_BY(mu_) = 0;  // live whole-server leases
  // Updates in flight by the generation they started in: a freeze waits only for those that
  // started before it, so a stream of new updates cannot starve it.
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uint64_t, int64_t> in_flight_ ABSL_GUARDED_BY(mu_);
  struct Ended {
    uint64_t id;
    std::string owner;
    bool lapsed;  // expired or dropped, rather than released
  };
  std::deque<Ended> ended_ ABSL_GUARDED_BY(mu_);  // the last few leases that ended
  int64_t expired_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ecps

#endif  // ECPS_PS_UPDATE_GATE_H_
