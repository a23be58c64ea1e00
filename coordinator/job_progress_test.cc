#include "coordinator/job_progress.h"

#include "gtest/gtest.h"
#include "proto/ecps.pb.h"

namespace ecps {
namespace {

v1::WorkerProgress Progress(int64_t step, double rate, double loss, bool done = false) {
  v1::WorkerProgress p;
  p.set_step(step);
  p.set_samples(step * 100);
  p.set_samples_per_s(rate);
  p.set_loss(loss);
  p.set_eval_auc(-1);
  p.set_done(done);
  return p;
}

TEST(JobProgressTest, AggregatesWorkers) {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  JobProgress progress(3, 100);
  progress.MarkRunning(t0);
  v1::WorkerProgress w0 = Progress(10, 100, 0.5);
  w0.set_eval_auc(0.7);
  w0.set_eval_logloss(0.45);
  w0.set_eval_step(10);
  progress.Report(0, w0);
  progress.Report(1, Progress(8, 80, 0.7));
  progress.Report(2, Progress(12, 120, 0.6));
  progress.Report(7, Progress(1000, 1e9, 9));  // out of range: ignored

  ProgressSummary s = progress.Summarize(t0 + absl::Seconds(10));
  EXPECT_EQ(s.step, 8);
  EXPECT_EQ(s.total_steps, 100);
  EXPECT_EQ(s.samples, 3000);
  EXPECT_DOUBLE_EQ(s.samples_per_s, 300);
  EXPECT_NEAR(s.loss, 0.6, 1e-12);
  EXPECT_DOUBLE_EQ(s.eval_auc, 0.7);
  EXPECT_DOUBLE_EQ(s.eval_logloss, 0.45);
  EXPECT_EQ(s.eval_step, 10);
  EXPECT_DOUBLE_EQ(s.elapsed_s, 10);
  // 8 steps in 10 s: 92 remaining steps at 0.8 steps/s.
  EXPECT_NEAR(s.eta_s, 115, 1e-9);
}

TEST(JobProgressTest, UnreportedWorkerHoldsStepAtZeroAndNoEta) {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  JobProgress progress(2, 100);
  EXPECT_EQ(progress.Summarize(t0).elapsed_s, 0) << "no elapsed time before running";
  progress.MarkRunning(t0);
  progress.Report(0, Progress(50, 100, 0.4));
  ProgressSummary s = progress.Summarize(t0 + absl::Seconds(5));
  EXPECT_EQ(s.step, 0);
  EXPECT_EQ(s.eta_s, -1);
  EXPECT_DOUBLE_EQ(s.loss, 0.4) << "only workers that stepped count in the loss";
  EXPECT_EQ(s.eval_auc, -1) << "no evaluation yet";
}

TEST(JobProgressTest, LatestEvaluationWins) {
  JobProgress progress(2, 100);
  v1::WorkerProgress a = Progress(10, 1, 0.5);
  a.set_eval_auc(0.7);
  a.set_eval_step(10);
  v1::WorkerProgress b = Progress(20, 1, 0.5);
  b.set_eval_auc(0.8);
  b.set_eval_step(20);
  progress.Report(0, a);
  progress.Report(1, b);
  EXPECT_DOUBLE_EQ(progress.Summarize(absl::FromUnixSeconds(1)).eval_auc, 0.8);
  // A later report without an evaluation keeps the worker's last one.
  progress.Report(1, Progress(25, 1, 0.5));
  EXPECT_DOUBLE_EQ(progress.Summarize(absl::FromUnixSeconds(1)).eval_auc, 0.8);
}

TEST(JobProgressTest, DoneWorkersStopCountingRateAndEndFreezesElapsed) {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  JobProgress progress(2, 100);
  progress.MarkRunning(t0);
  progress.Report(0, Progress(100, 300, 0.3, /*done=*/true));
  progress.Report(1, Progress(60, 200, 0.4));
  EXPECT_DOUBLE_EQ(progress.Summarize(t0 + absl::Seconds(1)).samples_per_s, 200);
  progress.MarkEnded(t0 + absl::Seconds(20));
  ProgressSummary s = progress.Summarize(t0 + absl::Seconds(500));
  EXPECT_DOUBLE_EQ(s.elapsed_s, 20);
  EXPECT_EQ(s.eta_s, 0);
}

}  // namespace
}  // namespace ecps
