// The project's one injectable clock: time read through an interface, so that tests drive
// timeouts deterministically with FakeClock.
//
// Every timing decision in coordinator/ (heartbeat age, suspicion, startup timeout, elapsed
// time, ETA, the checkpoint schedule) reads a Clock passed in by the owner, a RealClock in
// production. So do ps/'s UpdateGate (freeze leases) and RebuildQueue (hint lingering), and
// worker/'s ProgressBoard; their owners pass a MonotonicClock, so that a step of the wall clock
// (NTP, an operator) neither lapses nor stretches a lease. The rest reads std::chrono::steady_clock directly: what waits
// in real time (a loop's period, an RPC's or a poll's deadline), and the pure decisions that
// take `now` as an argument, which tests call with any time they like (CoordinatorGrace, the
// lifecycles' Heartbeat, ScrubPacer). One seam keeps steady time of its own, on purpose:
// RetryEnv (runtime/retry_policy.h) injects time with sleep and random draws, since a retry's
// time moves by its own sleeps.
#ifndef ECPS_RUNTIME_CLOCK_H_
#define ECPS_RUNTIME_CLOCK_H_

#include <chrono>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace ecps {

// Thread-safe source of the current time.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
};

// The system clock (absl::Now()).
class RealClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
};

// The system's steady clock (std::chrono::steady_clock): it never steps back or jumps with
// the wall clock. Only differences between its readings are meaningful; a reading is not a
// date (its epoch is the steady clock's, often the boot, shifted to the Unix epoch).
class MonotonicClock final : public Clock {
 public:
  absl::Time Now() const override {
    return absl::UnixEpoch() +
           absl::FromChrono(std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch()));
  }
};

// A clock that moves only when told to (tests). Thread-safe.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'000'000)) : now_(start) {}
  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ecps

#endif  // ECPS_RUNTIME_CLOCK_H_
