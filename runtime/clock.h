// The project's one injectable clock: time read through an interface, so that tests drive
// timeouts deterministically with FakeClock.
//
// Every timing decision in coordinator/ (heartbeat age, suspicion, startup timeout, elapsed
// time, ETA, the checkpoint schedule) reads a Clock passed in by the owner; only RealClock
// reads the system clock. It lives in runtime/ so that ps/ and worker/ can take the same one
// (ps/'s UpdateGate and RebuildQueue still take a steady-clock function, with
// ps/fake_clock.h's FakeSteadyClock in their tests). What must wait in real time (a loop's
// period, a lease's deadline) reads the system's clocks directly.
#ifndef ECPS_RUNTIME_CLOCK_H_
#define ECPS_RUNTIME_CLOCK_H_

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
