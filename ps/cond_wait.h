// One bounded wait on an absl::CondVar against the steady clock, for loops that wait for a
// condition with a deadline:
//
//   while (!ready_) {
//     if (!WaitBefore(&cv_, &mu_, deadline)) break;  // the deadline passed
//   }
//
// The condition stays in the caller, where the compiler checks it is read under the lock.
#ifndef ECPS_PS_COND_WAIT_H_
#define ECPS_PS_COND_WAIT_H_

#include <chrono>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace ecps {

// Waits on `cv` (with `mu` held) until it is signalled or `deadline` comes; returns false,
// without waiting, once the deadline has passed. Wake-ups may be spurious: callers loop.
inline bool WaitBefore(absl::CondVar* cv, absl::Mutex* mu,
                       std::chrono::steady_clock::time_point deadline)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(*mu) {
  const std::chrono::steady_clock::duration left = deadline - std::chrono::steady_clock::now();
  if (left <= std::chrono::steady_clock::duration::zero()) return false;
  cv->WaitWithTimeout(mu, absl::FromChrono(left));
  return true;
}

}  // namespace ecps

#endif  // ECPS_PS_COND_WAIT_H_
