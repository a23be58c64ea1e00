// One way to retry, for every caller that tries again after a failure (an RPC, a parity batch,
// a rebuild batch, a registration): how long to wait between attempts, how many attempts or
// how long in all, and which errors are worth another attempt, by code or by kind
// (runtime/error_kind.h). After Ray's ExponentialBackoff (src/ray/util/exponential_backoff.h).
//
// RetryPolicy says what to do and is a plain value (no allocation to copy it); a Retrier is
// one retrying operation in progress (its attempts, its next wait, its deadline). Time, sleep
// and the random draws of the jitter come from a RetryEnv, so a test drives a Retrier with a
// fake clock and never sleeps. docs/architecture.md ("Retries") lists every caller's policy.
#ifndef ECPS_RUNTIME_RETRY_POLICY_H_
#define ECPS_RUNTIME_RETRY_POLICY_H_

#include <chrono>
#include <cstdint>
#include <initializer_list>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "runtime/error_kind.h"

namespace ecps {

// A set of status codes, as bits.
class StatusCodeSet {
 public:
  constexpr StatusCodeSet() = default;
  constexpr StatusCodeSet(std::initializer_list<absl::StatusCode> codes) {
    for (absl::StatusCode c : codes) bits_ |= Bit(c);
  }
  // Every error code (OK is never an error to retry).
  static constexpr StatusCodeSet AllErrors() {
    StatusCodeSet all;
    all.bits_ = ((uint32_t{1} << (kLast + 1)) - 1) & ~Bit(absl::StatusCode::kOk);
    return all;
  }
  constexpr StatusCodeSet Without(absl::StatusCode code) const {
    StatusCodeSet less = *this;
    less.bits_ &= ~Bit(code);
    return less;
  }
  constexpr bool Contains(absl::StatusCode code) const {
    const int c = static_cast<int>(code);
    return c > 0 && c <= kLast && (bits_ & Bit(code)) != 0;
  }

 private:
  static constexpr int kLast = static_cast<int>(absl::StatusCode::kUnauthenticated);
  static constexpr uint32_t Bit(absl::StatusCode code) {
    return uint32_t{1} << (static_cast<int>(code) & 31);
  }
  uint32_t bits_ = 0;
};

struct RetryPolicy {
  // The wait after the first failed attempt. After each wait the next one is
  // multiplier * wait + increment, at most max_backoff: doubling is (2, 0), a constant
  // interval (1, 0), linear growth (1, initial_backoff).
  std::chrono::milliseconds initial_backoff{20};
  double multiplier = 2.0;
  std::chrono::milliseconds increment{0};
  std::chrono::milliseconds max_backoff{1000};
  // Attempts in all, the first one included; 0: no limit.
  int max_attempts = 0;
  // How long after the Retrier was made another attempt may still begin; no wait runs past
  // it. 0: no limit.
  std::chrono::milliseconds deadline{0};
  // What is retried: an error whose code is in `codes` or whose kind is in `kinds`.
  StatusCodeSet codes{absl::StatusCode::kUnavailable};
  ErrorKindSet kinds;
  // In [0, 1]: each wait is drawn uniformly from [(1 - jitter) * wait, wait], so that callers
  // that failed together do not retry together. 0: no jitter, no random draw.
  double jitter = 0;

  // Whether `status` is an error this policy retries (OK never is).
  bool Retries(const absl::Status& status) const {
    return !status.ok() && (codes.Contains(status.code()) || kinds.Contains(ErrorKindOf(status)));
  }
};

// Where a Retrier gets the time, its sleep and its random draws.
class RetryEnv {
 public:
  virtual ~RetryEnv() = default;
  virtual std::chrono::steady_clock::time_point Now() = 0;
  virtual void SleepFor(std::chrono::steady_clock::duration duration) = 0;
  // A uniform draw from [0, 1), for the jitter.
  virtual double Uniform() = 0;
  // The real one: the steady clock, std::this_thread::sleep_for, absl::BitGen. It keeps no
  // state; thread-safe.
  static RetryEnv* Real();
};

// One retrying operation: counts its failed attempts, knows its next wait and its deadline.
// Not thread-safe: one per operation, on the operation's thread. Nothing allocates.
class Retrier {
 public:
  // The deadline (policy.deadline) counts from now.
  explicit Retrier(const RetryPolicy& policy, RetryEnv* env = RetryEnv::Real());

  const RetryPolicy& policy() const { return policy_; }

  // After an attempt that failed with `status`: counts it and says whether to try again,
  // which is when the policy retries `status` and attempts and time are left.
  bool ShouldRetry(const absl::Status& status) { return policy_.Retries(status) && CountAttempt(); }
  // Counts a failed attempt (a round of calls that failed in several ways, each checked with
  // policy().Retries); true while another attempt is allowed: fewer than max_attempts so far,
  // and the deadline not passed.
  bool CountAttempt();
  // True once the deadline has passed (never without one).
  bool Expired();

  // Sleeps the next wait (never past the deadline) and makes the one after it longer.
  void Wait() {
    Hold();
    Grow();
  }
  // Sleeps the next wait without making the one after it longer (a caller that grows it once
  // per round of candidates).
  void Hold();
  void Grow();
  // Waits as Wait does, but checks `wake_early` every `poll` and returns at once (true) when it
  // holds: the caller has news that makes an attempt worth it now (a new cluster map). The
  // waits then start again from initial_backoff.
  bool WaitOrWake(absl::FunctionRef<bool()> wake_early, std::chrono::milliseconds poll);
  // The next wait (jittered, cut at the deadline), and makes the one after it longer: for a
  // caller that waits its own way (on a condition variable that also hears of a stop).
  std::chrono::steady_clock::duration NextBackoff();

  // The next wait before jitter.
  std::chrono::milliseconds backoff() const { return backoff_; }
  // Failed attempts counted so far.
  int attempts() const { return attempts_; }
  // An attempt got through: no attempts counted, and the next wait is initial_backoff again.
  // The deadline stays where it was.
  void Reset();

 private:
  // The next wait, jittered and cut at the deadline.
  std::chrono::steady_clock::duration Jittered();

  const RetryPolicy policy_;
  RetryEnv* const env_;
  const std::chrono::steady_clock::time_point deadline_;  // max() without one
  std::chrono::milliseconds backoff_;
  int attempts_ = 0;
};

// Calls `attempt` until it succeeds, or fails with an error `policy` does not retry, or the
// attempts or the time run out, waiting between attempts; returns the last status.
absl::Status RetryUntilDone(const RetryPolicy& policy, absl::FunctionRef<absl::Status()> attempt,
                            RetryEnv* env = RetryEnv::Real());

}  // namespace ecps

#endif  // ECPS_RUNTIME_RETRY_POLICY_H_
