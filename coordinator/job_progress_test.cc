#include "coordinator/job_progress.h"

#include <cmath>
#include <cstdint>
#include <deque>
#include <optional>
#include <random>

#include "gtest/gtest.h"
#include "proto/ecps.pb.h"

namespace ecps {
namespace {

// Progress after `step` steps of 100 samples each.
v1::WorkerProgress Progress(int64_t step, double loss, bool done = false) {
  v1::WorkerProgress p;
  p.set_step(step);
  p.set_samples(step * 100);
  p.set_loss(loss);
  p.set_eval_auc(-1);
  p.set_done(done);
  return p;
}

TEST(JobProgressTest, AggregatesWorkers) {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  JobProgress progress(3, 100);
  progress.MarkRunning(t0);
  // Each worker steps once a second (100 samples/s) from t0 + 8 s on.
  for (int64_t last : {9, 10}) {
    const absl::Time t = t0 + absl::Seconds(last);
    v1::WorkerProgress w0 = Progress(last, 0.5);
    w0.set_eval_auc(0.7);
    w0.set_eval_logloss(0.45);
    w0.set_eval_step(10);
    progress.Report(0, w0, t);
    progress.Report(1, Progress(last - 2, 0.7), t);
    progress.Report(2, Progress(last + 2, 0.6), t);
    progress.Report(7, Progress(1000, 9), t);  // out of range: ignored
  }

  ProgressSummary s = progress.Summarize(t0 + absl::Seconds(10));
  EXPECT_EQ(s.step, 8);
  EXPECT_EQ(s.total_steps, 100);
  EXPECT_EQ(s.samples, 3000);
  EXPECT_DOUBLE_EQ(s.samples_per_s, 300);
  EXPECT_DOUBLE_EQ(progress.WorkerRate(1), 100);
  EXPECT_EQ(progress.WorkerRate(7), 0) << "out of range";
  EXPECT_NEAR(s.loss, 0.6, 1e-12);
  EXPECT_DOUBLE_EQ(s.eval_auc, 0.7);
  EXPECT_DOUBLE_EQ(s.eval_logloss, 0.45);
  EXPECT_EQ(s.eval_step, 10);
  EXPECT_DOUBLE_EQ(s.elapsed_s, 10);
  // 8 steps in 10 s: 92 remaining steps at 0.8 steps/s.
  EXPECT_NEAR(s.eta_s, 115, 1e-9);
}

TEST(JobProgressTest, DataEpochIsTheSlowestTrainingWorkers) {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  JobProgress progress(3, 100);
  progress.MarkRunning(t0);
  EXPECT_EQ(progress.Summarize(t0).data_epoch, 0) << "no report yet";
  for (int worker = 0; worker < 3; ++worker) {
    v1::WorkerProgress p = Progress(10 + worker, 0.5);
    p.set_data_epoch(worker == 0 ? 0 : worker + 1);  // worker 0: nothing trained yet
    p.set_data_epochs(3);
    progress.Report(worker, p, t0 + absl::Seconds(1));
  }
  const ProgressSummary s = progress.Summarize(t0 + absl::Seconds(1));
  EXPECT_EQ(s.data_epoch, 2) << "worker 1, in its second pass; worker 0 has none yet";
  EXPECT_EQ(s.data_epochs, 3);
}

TEST(JobProgressTest, UnreportedWorkerHoldsStepAtZeroAndNoEta) {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  JobProgress progress(2, 100);
  EXPECT_EQ(progress.Summarize(t0).elapsed_s, 0) << "no elapsed time before running";
  progress.MarkRunning(t0);
  progress.Report(0, Progress(50, 0.4), t0);
  ProgressSummary s = progress.Summarize(t0 + absl::Seconds(5));
  EXPECT_EQ(s.step, 0);
  EXPECT_EQ(s.eta_s, -1);
  EXPECT_EQ(s.samples_per_s, 0) << "one report shows no rate";
  EXPECT_DOUBLE_EQ(s.loss, 0.4) << "only workers that stepped count in the loss";
  EXPECT_EQ(s.eval_auc, -1) << "no evaluation yet";
}

TEST(JobProgressTest, LatestEvaluationWins) {
  const absl::Time t = absl::FromUnixSeconds(1);
  JobProgress progress(2, 100);
  v1::WorkerProgress a = Progress(10, 0.5);
  a.set_eval_auc(0.7);
  a.set_eval_step(10);
  v1::WorkerProgress b = Progress(20, 0.5);
  b.set_eval_auc(0.8);
  b.set_eval_step(20);
  progress.Report(0, a, t);
  progress.Report(1, b, t);
  EXPECT_DOUBLE_EQ(progress.Summarize(t).eval_auc, 0.8);
  // A later report without an evaluation keeps the worker's last one.
  progress.Report(1, Progress(25, 0.5), t);
  EXPECT_DOUBLE_EQ(progress.Summarize(t).eval_auc, 0.8);
}

TEST(JobProgressTest, DoneWorkersStopCountingRateAndEndFreezesElapsed) {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  JobProgress progress(2, 100);
  progress.MarkRunning(t0);
  progress.Report(0, Progress(97, 0.3), t0);
  progress.Report(1, Progress(58, 0.4), t0);
  progress.Report(0, Progress(100, 0.3, /*done=*/true), t0 + absl::Seconds(1));
  progress.Report(1, Progress(60, 0.4), t0 + absl::Seconds(1));
  EXPECT_DOUBLE_EQ(progress.Summarize(t0 + absl::Seconds(1)).samples_per_s, 200);
  EXPECT_EQ(progress.WorkerRate(0), 0);
  progress.MarkEnded(t0 + absl::Seconds(20));
  ProgressSummary s = progress.Summarize(t0 + absl::Seconds(500));
  EXPECT_DOUBLE_EQ(s.elapsed_s, 20);
  EXPECT_EQ(s.eta_s, 0);
}

// WindowRate on its own: the two points it divides between.

TEST(WindowRateTest, FewerThanTwoPointsShowNoRate) {
  const absl::Time t = absl::FromUnixSeconds(100);
  EXPECT_EQ(WindowRate({}, t, absl::Seconds(2)), 0);
  EXPECT_EQ(WindowRate({{t, 5, 500}}, t, absl::Seconds(2)), 0);
}

TEST(WindowRateTest, DividesBetweenTheNewestPointAndTheNewestOneAWindowBefore) {
  const absl::Time t = absl::FromUnixSeconds(100);
  const std::deque<CounterPoint> points = {{t, 0, 0},
                                           {t + absl::Seconds(1), 10, 1000},
                                           {t + absl::Seconds(2), 20, 3000},
                                           {t + absl::Seconds(3), 30, 5000}};
  // From the point at 1 s (2 s before the newest): 4000 samples in 2 s.
  EXPECT_DOUBLE_EQ(WindowRate(points, t + absl::Seconds(3), absl::Seconds(2)), 2000);
  // A window longer than the points: from the oldest.
  EXPECT_DOUBLE_EQ(WindowRate(points, t + absl::Seconds(3), absl::Seconds(10)), 5000.0 / 3);
}

TEST(WindowRateTest, AStallLongerThanAStepLowersTheRateAndOneLongerThanTheWindowEndsIt) {
  const absl::Time t = absl::FromUnixSeconds(100);
  std::deque<CounterPoint> points;
  for (int i = 0; i <= 30; ++i) points.push_back({t + i * absl::Milliseconds(100), i, 100 * i});
  const absl::Time last = points.back().at;
  const absl::Duration window = absl::Seconds(2);
  // Up to a step (100 ms) without a new one is the step still running.
  EXPECT_DOUBLE_EQ(WindowRate(points, last + absl::Milliseconds(100), window), 1000);
  // 1.1 s still: the window ends 1 s after the newest point and holds its last 1 s of steps.
  EXPECT_NEAR(WindowRate(points, last + absl::Milliseconds(1100), window), 500, 1e-6);
  EXPECT_EQ(WindowRate(points, last + absl::Milliseconds(2200), window), 0);
}

// A worker that finishes a step of `batch` samples every `step_time` from `start`, with its
// heartbeats as a ProgressBoard takes them: the count of the last step finished and how
// long ago it finished, and the worker's own rate over its last report interval (which the
// coordinator must not show: it swings by a step's worth from one report to the next).
struct SteadyWorker {
  absl::Time start;
  absl::Duration step_time;
  int64_t batch;
  int64_t first_step = 0;  // steps before `start` (a replacement resumes after them)

  int64_t StepsAt(absl::Time t) const {
    return first_step + (t < start ? 0 : (t - start) / step_time);
  }
  v1::WorkerProgress At(absl::Time t, absl::Time previous) const {
    v1::WorkerProgress p;
    const int64_t steps = StepsAt(t);
    p.set_step(steps);
    p.set_samples(steps * batch);
    p.set_samples_age_s(
        absl::ToDoubleSeconds(t - std::min(t, start + (steps - first_step) * step_time)));
    p.set_samples_per_s(static_cast<double>((steps - StepsAt(previous)) * batch) /
                        absl::ToDoubleSeconds(t - previous));
    return p;
  }
  double Rate() const { return batch / absl::ToDoubleSeconds(step_time); }
};

// Heartbeats every 180-260 ms (the interval plus the RPC), each received 0-5 ms after it was
// taken, and Status polls every 450-650 ms, from `from` to `to`. `worker` says what each
// heartbeat holds (nothing: no heartbeat, the worker is dead); `poll` sees every summary.
template <typename WorkerAt, typename Poll>
void Simulate(JobProgress* progress, absl::Time from, absl::Time to, WorkerAt worker,
              Poll poll) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> beat_ms(180, 260), transit_us(0, 5000), poll_ms(450, 650);
  absl::Time beat = from, next_poll = from, previous = from - absl::Milliseconds(200);
  while (beat < to) {
    while (next_poll <= beat) {
      poll(next_poll, progress->Summarize(next_poll));
      next_poll += absl::Milliseconds(poll_ms(rng));
    }
    const std::optional<v1::WorkerProgress> report = worker(beat, previous);
    if (report.has_value()) {
      progress->Report(0, *report, beat + absl::Microseconds(transit_us(rng)));
    }
    previous = beat;
    beat += absl::Milliseconds(beat_ms(rng));
  }
}

TEST(JobProgressRateTest, SteadyTrainingShowsAFlatRateWhateverTheHeartbeatsAndPollTimes) {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  // 37 ms steps: a heartbeat interval holds 4 to 7 of them.
  const SteadyWorker w{t0, absl::Milliseconds(37), 512};
  JobProgress progress(1, 1000);
  double reported_min = 1e18, reported_max = 0;
  int polls = 0;
  Simulate(&progress, t0, t0 + absl::Seconds(30),
           [&](absl::Time t, absl::Time previous) -> std::optional<v1::WorkerProgress> {
             v1::WorkerProgress p = w.At(t, previous);
             if (t > t0 + absl::Seconds(1)) {
               reported_min = std::min(reported_min, p.samples_per_s());
               reported_max = std::max(reported_max, p.samples_per_s());
             }
             return p;
           },
           [&](absl::Time t, const ProgressSummary& s) {
             if (t < t0 + kRateWindow + absl::Milliseconds(300)) return;
             ++polls;
             // Within 1%: only the transit jitter (5 ms at either end of the 2 s window) is left.
             EXPECT_NEAR(s.samples_per_s / w.Rate(), 1, 0.01) << "at " << t;
           });
  EXPECT_GT(polls, 40);
  // What the job showed before: each report's own rate, more than 20% apart.
  EXPECT_GT(reported_max / reported_min, 1.2) << reported_min << " to " << reported_max;
}

TEST(JobProgressRateTest, ReportsWithoutAnAgeAreDatedOnReceipt) {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  const SteadyWorker w{t0, absl::Milliseconds(37), 512};
  JobProgress progress(1, 1000);
  Simulate(&progress, t0, t0 + absl::Seconds(20),
           [&](absl::Time t, absl::Time previous) -> std::optional<v1::WorkerProgress> {
             v1::WorkerProgress p = w.At(t, previous);
             p.clear_samples_age_s();  // a worker from before the field
             return p;
           },
           [&](absl::Time t, const ProgressSummary& s) {
             if (t < t0 + kRateWindow + absl::Milliseconds(300)) return;
             // Off by at most a step (37 ms) over the window at each end.
             EXPECT_NEAR(s.samples_per_s / w.Rate(), 1, 0.04) << "at " << t;
           });
}

TEST(JobProgressRateTest, AChangeOfRateShowsWithinTheWindow) {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  const absl::Time change = t0 + absl::Seconds(10);
  const SteadyWorker fast{t0, absl::Milliseconds(37), 512};
  // From `change` on, steps take twice as long.
  const SteadyWorker slow{change, absl::Milliseconds(74), 512, fast.StepsAt(change)};
  JobProgress progress(1, 1000);
  // A poll may come up to a heartbeat interval (260 ms) after the window has passed.
  const absl::Time settled = change + kRateWindow + absl::Milliseconds(300);
  int after = 0;
  Simulate(
      &progress, t0, t0 + absl::Seconds(20),
      [&](absl::Time t, absl::Time previous) -> std::optional<v1::WorkerProgress> {
        // The counter is continuous at the change (the slow run starts at the fast one's
        // step count), so a report is the fast or the slow worker's by its time.
        return t < change ? fast.At(t, previous) : slow.At(t, previous);
      },
      [&](absl::Time t, const ProgressSummary& s) {
        if (t < t0 + kRateWindow + absl::Milliseconds(300)) return;
        if (t <= change) {
          EXPECT_NEAR(s.samples_per_s / fast.Rate(), 1, 0.01) << "at " << t;
        } else if (t >= settled) {
          ++after;
          EXPECT_NEAR(s.samples_per_s / slow.Rate(), 1, 0.01) << "at " << t;
        } else {  // in the window: between the two, no overshoot
          EXPECT_LE(s.samples_per_s, fast.Rate() * 1.01) << "at " << t;
          EXPECT_GE(s.samples_per_s, slow.Rate() * 0.99) << "at " << t;
        }
      });
  EXPECT_GT(after, 10);
}

TEST(JobProgressRateTest, AReplacedWorkerShowsNoSpikeAndItsReplacementTheRate) {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  const SteadyWorker dead{t0, absl::Milliseconds(37), 512};
  const absl::Time died = t0 + absl::Seconds(8);
  const absl::Time declared = died + absl::Milliseconds(1500);
  // The replacement registers 1 s after, shows the dead worker's last reported progress on
  // its board, and trains from 2 s after that (its start-up: tables, the first pulls).
  const absl::Time registered = declared + absl::Seconds(1);
  const SteadyWorker replacement{registered + absl::Seconds(2), absl::Milliseconds(37), 512,
                                 dead.StepsAt(died - absl::Milliseconds(100))};
  JobProgress progress(1, 1000);
  int recovered = 0;
  bool stopped = false;
  Simulate(
      &progress, t0, t0 + absl::Seconds(25),
      [&](absl::Time t, absl::Time previous) -> std::optional<v1::WorkerProgress> {
        if (t >= declared && !stopped) {
          progress.Stopped(0);  // the coordinator declares it dead
          stopped = true;
        }
        if (t < died) return dead.At(t, previous);
        if (t < registered) return std::nullopt;  // dead, then no worker at all
        v1::WorkerProgress p = replacement.At(t, previous);
        // Until training starts the board's count is the resume point, reached at start-up.
        if (t < replacement.start) p.set_samples_age_s(absl::ToDoubleSeconds(t - registered));
        return p;
      },
      [&](absl::Time t, const ProgressSummary& s) {
        EXPECT_GE(s.samples_per_s, 0) << "at " << t;
        EXPECT_LE(s.samples_per_s, dead.Rate() * 1.01) << "at " << t;
        if (t >= declared && t < replacement.start) {
          EXPECT_EQ(s.samples_per_s, 0) << "nobody trains at " << t;
        }
        if (t >= replacement.start + kRateWindow + absl::Milliseconds(300)) {
          ++recovered;
          EXPECT_NEAR(s.samples_per_s / replacement.Rate(), 1, 0.01) << "at " << t;
        }
      });
  EXPECT_GT(recovered, 10);
}

TEST(JobProgressRateTest, AStallEndsTheRateAndARewoundCounterStartsANewRun) {
  // Mode checkpoint: a rollback stops every worker (its heartbeats go on), then rewinds its
  // counter to the checkpoint's.
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  const SteadyWorker before{t0, absl::Milliseconds(37), 512};
  const absl::Time paused = t0 + absl::Seconds(6);
  const absl::Time last_step = t0 + before.StepsAt(paused) * before.step_time;
  const absl::Time rewound = t0 + absl::Seconds(10);
  const SteadyWorker after{rewound, absl::Milliseconds(37), 512, /*first_step=*/50};
  JobProgress progress(1, 1000);
  int still = 0, settled = 0;
  Simulate(
      &progress, t0, t0 + absl::Seconds(18),
      [&](absl::Time t, absl::Time previous) -> std::optional<v1::WorkerProgress> {
        if (t < paused) return before.At(t, previous);
        if (t < rewound) {
          v1::WorkerProgress p = before.At(paused, previous);
          p.set_samples_age_s(absl::ToDoubleSeconds(t - last_step));
          return p;
        }
        return after.At(t, previous);
      },
      [&](absl::Time t, const ProgressSummary& s) {
        EXPECT_GE(s.samples_per_s, 0) << "at " << t;
        EXPECT_LE(s.samples_per_s, before.Rate() * 1.01) << "at " << t;
        // Stopped for longer than the window and a step, as the latest heartbeat says.
        if (t >= last_step + kRateWindow + absl::Milliseconds(37 + 300) && t < rewound) {
          ++still;
          EXPECT_EQ(s.samples_per_s, 0) << "stalled at " << t;
        }
        if (t >= rewound + kRateWindow + absl::Milliseconds(300)) {
          ++settled;
          EXPECT_NEAR(s.samples_per_s / after.Rate(), 1, 0.01) << "at " << t;
        }
      });
  EXPECT_GT(still, 2);
  EXPECT_GT(settled, 5);
}

}  // namespace
}  // namespace ecps
