// The coordinator's view of time, injected so that tests drive timeouts deterministically.
//
// Every timing decision in coordinator/ (heartbeat age, suspicion, startup timeout, elapsed
// time, ETA) reads a Clock passed in by the owner; only RealClock reads the system clock.
#ifndef ECPS_COORDINATOR_CLOCK_H_
#define ECPS_COORDINATOR_CLOCK_H_

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

#endif  // ECPS_COORDINATOR_CLOCK_H_
