#include "runtime/retry_policy.h"

#include <algorithm>
#include <thread>

#include "absl/random/random.h"

namespace ecps {
namespace {

using Clock = std::chrono::steady_clock;

class RealRetryEnv : public RetryEnv {
 public:
  Clock::time_point Now() override { return Clock::now(); }
  void SleepFor(Clock::duration duration) override { std::this_thread::sleep_for(duration); }
  double Uniform() override {
    absl::BitGen gen;
    return absl::Uniform(gen, 0.0, 1.0);
  }
};

}  // namespace

RetryEnv* RetryEnv::Real() {
  static RealRetryEnv* const env = new RealRetryEnv();  // stateless; never destroyed
  return env;
}

Retrier::Retrier(const RetryPolicy& policy, RetryEnv* env)
    : policy_(policy),
      env_(env),
      deadline_(policy.deadline.count() > 0 ? env->Now() + policy.deadline
                                            : Clock::time_point::max()),
      backoff_(policy.initial_backoff) {}

bool Retrier::Expired() {
  return deadline_ != Clock::time_point::max() && env_->Now() >= deadline_;
}

bool Retrier::CountAttempt() {
  ++attempts_;
  if (policy_.max_attempts > 0 && attempts_ >= policy_.max_attempts) return false;
  return !Expired();
}

Clock::duration Retrier::Jittered() {
  Clock::duration wait = backoff_;
  if (policy_.jitter > 0) {
    const double keep = 1.0 - std::min(policy_.jitter, 1.0) * env_->Uniform();
    wait = std::chrono::duration_cast<Clock::duration>(backoff_ * keep);
  }
  if (deadline_ != Clock::time_point::max()) {
    wait = std::max(Clock::duration::zero(), std::min(wait, deadline_ - env_->Now()));
  }
  return wait;
}

void Retrier::Hold() {
  const Clock::duration wait = Jittered();
  if (wait > Clock::duration::zero()) env_->SleepFor(wait);
}

void Retrier::Grow() {
  const auto grown = std::chrono::duration_cast<std::chrono::milliseconds>(
                         backoff_ * std::max(policy_.multiplier, 1.0)) +
                     policy_.increment;
  backoff_ = std::min(policy_.max_backoff, std::max(grown, backoff_));
}

bool Retrier::WaitOrWake(absl::FunctionRef<bool()> wake_early, std::chrono::milliseconds poll) {
  const Clock::time_point until = env_->Now() + Jittered();
  Grow();
  while (true) {
    if (wake_early()) {
      backoff_ = policy_.initial_backoff;
      return true;
    }
    const Clock::time_point now = env_->Now();
    if (now >= until) return false;
    env_->SleepFor(std::min<Clock::duration>(poll, until - now));
  }
}

Clock::duration Retrier::NextBackoff() {
  const Clock::duration wait = Jittered();
  Grow();
  return wait;
}

void Retrier::Reset() {
  attempts_ = 0;
  backoff_ = policy_.initial_backoff;
}

absl::Status RetryUntilDone(const RetryPolicy& policy, absl::FunctionRef<absl::Status()> attempt,
                            RetryEnv* env) {
  Retrier retrier(policy, env);
  while (true) {
    absl::Status status = attempt();
    if (!retrier.ShouldRetry(status)) return status;
    retrier.Wait();
  }
}

}  // namespace ecps
