#include "runtime/retry_policy.h"

#include <chrono>
#include <deque>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/error_kind.h"

namespace ecps {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// Time moves only when a Retrier sleeps; every sleep is recorded. No test sleeps for real.
class FakeRetryEnv : public RetryEnv {
 public:
  Clock::time_point Now() override { return now_; }
  void SleepFor(Clock::duration d) override {
    sleeps_.push_back(std::chrono::duration_cast<milliseconds>(d));
    now_ += d;
  }
  double Uniform() override {
    const double u = draws_.empty() ? 0.0 : draws_.front();
    if (!draws_.empty()) draws_.pop_front();
    return u;
  }
  void Advance(milliseconds d) { now_ += d; }
  void Draw(double u) { draws_.push_back(u); }
  const std::vector<milliseconds>& sleeps() const { return sleeps_; }
  milliseconds slept() const {
    milliseconds total{0};
    for (milliseconds s : sleeps_) total += s;
    return total;
  }

 private:
  Clock::time_point now_{std::chrono::hours(1)};
  std::vector<milliseconds> sleeps_;
  std::deque<double> draws_;
};

std::vector<milliseconds> Ms(std::initializer_list<int> ms) {
  std::vector<milliseconds> out;
  for (int m : ms) out.push_back(milliseconds(m));
  return out;
}

TEST(RetryPolicy, DoublesUpToTheCapAndStopsAfterMaxAttempts) {
  FakeRetryEnv env;
  RetryPolicy policy;  // 20 ms doubling to 1 s, UNAVAILABLE
  policy.max_attempts = 9;
  int calls = 0;
  absl::Status s = RetryUntilDone(
      policy, [&] { return ++calls, absl::UnavailableError("down"); }, &env);
  EXPECT_TRUE(absl::IsUnavailable(s));
  EXPECT_EQ(calls, 9);
  EXPECT_EQ(env.sleeps(), Ms({20, 40, 80, 160, 320, 640, 1000, 1000}));
}

TEST(RetryPolicy, OneAttemptMeansNoRetry) {
  FakeRetryEnv env;
  RetryPolicy policy;
  policy.max_attempts = 1;
  int calls = 0;
  auto down = [&] { return ++calls, absl::UnavailableError("down"); };
  RetryUntilDone(policy, down, &env).IgnoreError();
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(env.sleeps().empty());
}

TEST(RetryPolicy, OkAndErrorsNotRetriedReturnAtOnce) {
  FakeRetryEnv env;
  RetryPolicy policy;
  int calls = 0;
  auto ok = [&] { return ++calls, absl::OkStatus(); };
  EXPECT_TRUE(RetryUntilDone(policy, ok, &env).ok());
  EXPECT_EQ(calls, 1);
  absl::Status s = RetryUntilDone(
      policy, [&] { return ++calls, absl::DeadlineExceededError("slow"); }, &env);
  EXPECT_TRUE(absl::IsDeadlineExceeded(s));
  EXPECT_EQ(calls, 2);
  EXPECT_TRUE(env.sleeps().empty());
}

TEST(RetryPolicy, SucceedsOnALaterAttempt) {
  FakeRetryEnv env;
  RetryPolicy policy;
  int calls = 0;
  auto starting = [&] {
    return ++calls < 3 ? absl::UnavailableError("starting") : absl::OkStatus();
  };
  absl::Status s = RetryUntilDone(policy, starting, &env);
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(env.sleeps(), Ms({20, 40}));
}

TEST(RetryPolicy, RetriesByCodeOrByKind) {
  RetryPolicy policy;
  policy.codes = {absl::StatusCode::kUnavailable, absl::StatusCode::kCancelled};
  policy.kinds = {ErrorKind::kStaleEpoch};
  const absl::Status stale =
      WithErrorKind(absl::FailedPreconditionError("stale epoch 3 < 4"), ErrorKind::kStaleEpoch);
  const absl::Status behind =
      WithErrorKind(absl::FailedPreconditionError("behind"), ErrorKind::kReplicaBehind);
  EXPECT_TRUE(policy.Retries(absl::UnavailableError("")));
  EXPECT_TRUE(policy.Retries(absl::CancelledError("")));
  EXPECT_TRUE(policy.Retries(stale));
  EXPECT_FALSE(policy.Retries(behind));
  // The same text without the kind is not retried: the message is never read.
  EXPECT_FALSE(policy.Retries(absl::FailedPreconditionError("stale epoch 3 < 4")));
  EXPECT_FALSE(policy.Retries(absl::OkStatus()));
  EXPECT_FALSE(policy.Retries(absl::DeadlineExceededError("")));
}

TEST(RetryPolicy, CodeSets) {
  const StatusCodeSet all = StatusCodeSet::AllErrors();
  EXPECT_FALSE(all.Contains(absl::StatusCode::kOk));
  EXPECT_TRUE(all.Contains(absl::StatusCode::kCancelled));
  EXPECT_TRUE(all.Contains(absl::StatusCode::kUnauthenticated));
  EXPECT_TRUE(all.Contains(absl::StatusCode::kDataLoss));
  const StatusCodeSet but = all.Without(absl::StatusCode::kUnauthenticated);
  EXPECT_FALSE(but.Contains(absl::StatusCode::kUnauthenticated));
  EXPECT_TRUE(but.Contains(absl::StatusCode::kUnavailable));
  EXPECT_FALSE(StatusCodeSet().Contains(absl::StatusCode::kUnavailable));
  EXPECT_FALSE(all.Contains(static_cast<absl::StatusCode>(99)));
}

TEST(RetryPolicy, DeadlineCutsTheLastWaitAndEndsTheRetries) {
  FakeRetryEnv env;
  RetryPolicy policy;
  policy.initial_backoff = milliseconds(100);
  policy.max_backoff = milliseconds(100);
  policy.multiplier = 1;
  policy.deadline = milliseconds(250);
  int calls = 0;
  auto down = [&] { return ++calls, absl::UnavailableError("down"); };
  RetryUntilDone(policy, down, &env).IgnoreError();
  EXPECT_EQ(env.sleeps(), Ms({100, 100, 50}));
  EXPECT_EQ(calls, 4);  // the last one begins at the deadline and is not retried
}

TEST(RetryPolicy, ExpiredOnlyWithADeadline) {
  FakeRetryEnv env;
  RetryPolicy none;
  Retrier forever(none, &env);
  env.Advance(milliseconds(1'000'000));
  EXPECT_FALSE(forever.Expired());
  EXPECT_TRUE(forever.CountAttempt());
  RetryPolicy bounded;
  bounded.deadline = milliseconds(10);
  Retrier retrier(bounded, &env);
  EXPECT_FALSE(retrier.Expired());
  env.Advance(milliseconds(10));
  EXPECT_TRUE(retrier.Expired());
  EXPECT_FALSE(retrier.ShouldRetry(absl::UnavailableError("")));
}

TEST(RetryPolicy, LinearAndConstantIntervals) {
  FakeRetryEnv env;
  RetryPolicy linear;
  linear.initial_backoff = milliseconds(50);
  linear.multiplier = 1;
  linear.increment = milliseconds(50);
  linear.max_backoff = milliseconds(200);
  Retrier l(linear, &env);
  for (int i = 0; i < 5; ++i) l.Wait();
  EXPECT_EQ(env.sleeps(), Ms({50, 100, 150, 200, 200}));

  FakeRetryEnv env2;
  RetryPolicy constant;
  constant.initial_backoff = milliseconds(20);
  constant.multiplier = 1;
  constant.max_backoff = milliseconds(20);
  Retrier c(constant, &env2);
  for (int i = 0; i < 3; ++i) c.Wait();
  EXPECT_EQ(env2.sleeps(), Ms({20, 20, 20}));
}

TEST(RetryPolicy, JitterDrawsFromTheInjectedSource) {
  FakeRetryEnv env;
  RetryPolicy policy;
  policy.initial_backoff = milliseconds(100);
  policy.jitter = 0.5;
  env.Draw(0.0);
  env.Draw(1.0 - 1e-12);
  env.Draw(0.5);
  Retrier retrier(policy, &env);
  retrier.Wait();  // 100 ms, kept whole
  retrier.Wait();  // 200 ms, halved
  retrier.Wait();  // 400 ms, three quarters
  ASSERT_EQ(env.sleeps().size(), 3u);
  EXPECT_EQ(env.sleeps()[0], milliseconds(100));
  EXPECT_NEAR(env.sleeps()[1].count(), 100, 1);
  EXPECT_EQ(env.sleeps()[2], milliseconds(300));
}

TEST(RetryPolicy, NoJitterNoDraw) {
  FakeRetryEnv env;
  env.Draw(0.9);
  Retrier retrier(RetryPolicy{}, &env);
  retrier.Wait();
  EXPECT_EQ(env.sleeps(), Ms({20}));
}

TEST(RetryPolicy, HoldWaitsWithoutGrowing) {
  FakeRetryEnv env;
  Retrier retrier(RetryPolicy{}, &env);
  retrier.Hold();
  retrier.Hold();
  retrier.Grow();
  retrier.Hold();
  EXPECT_EQ(env.sleeps(), Ms({20, 20, 40}));
}

TEST(RetryPolicy, WakeEarlyEndsTheWaitAndStartsTheBackoffOver) {
  FakeRetryEnv env;
  RetryPolicy policy;  // 20, 40, 80 ...
  Retrier retrier(policy, &env);
  EXPECT_FALSE(retrier.WaitOrWake([] { return false; }, milliseconds(5)));
  EXPECT_EQ(env.slept(), milliseconds(20));
  EXPECT_EQ(env.sleeps().size(), 4u);  // polled every 5 ms
  EXPECT_EQ(retrier.backoff(), milliseconds(40));
  int polls = 0;
  EXPECT_TRUE(retrier.WaitOrWake([&] { return ++polls == 3; }, milliseconds(5)));
  EXPECT_EQ(env.slept(), milliseconds(30));  // two more polls of 5 ms, then woken
  EXPECT_EQ(retrier.backoff(), milliseconds(20));
}

TEST(RetryPolicy, NextBackoffIsForCallersThatWaitTheirOwnWay) {
  FakeRetryEnv env;
  RetryPolicy policy;
  policy.deadline = milliseconds(50);
  Retrier retrier(policy, &env);
  EXPECT_EQ(retrier.NextBackoff(), milliseconds(20));
  EXPECT_EQ(retrier.NextBackoff(), milliseconds(40));
  env.Advance(milliseconds(30));
  EXPECT_EQ(retrier.NextBackoff(), milliseconds(20));  // cut at the deadline
  EXPECT_TRUE(env.sleeps().empty());
}

TEST(RetryPolicy, ResetStartsOverButKeepsTheDeadline) {
  FakeRetryEnv env;
  RetryPolicy policy;
  policy.max_attempts = 2;
  policy.deadline = milliseconds(100);
  Retrier retrier(policy, &env);
  EXPECT_TRUE(retrier.CountAttempt());
  retrier.Wait();
  EXPECT_FALSE(retrier.CountAttempt());
  retrier.Reset();
  EXPECT_EQ(retrier.attempts(), 0);
  EXPECT_EQ(retrier.backoff(), milliseconds(20));
  EXPECT_TRUE(retrier.CountAttempt());
  env.Advance(milliseconds(100));
  retrier.Reset();
  EXPECT_FALSE(retrier.CountAttempt());
}

}  // namespace
}  // namespace ecps
