#include "cli/timeline.h"

#include "gtest/gtest.h"

namespace ecps {
namespace {

// 1000 samples/s from t=0 to t=10, then nothing more (the job finished).
std::vector<TimelinePoint> FinishesAtTen() {
  std::vector<TimelinePoint> tl;
  for (int t = 0; t <= 20; ++t) tl.push_back({double(t), 1000.0 * std::min(t, 10)});
  return tl;
}

TEST(Timeline, MeanRateInterpolates) {
  const auto tl = FinishesAtTen();
  EXPECT_DOUBLE_EQ(SamplesAt(tl, 2.5), 2500);
  EXPECT_DOUBLE_EQ(MeanRate(tl, 2, 6), 1000);
  EXPECT_DOUBLE_EQ(MeanRate(tl, 5, 15), 500) << "idle time after the job counts";
  EXPECT_LT(MeanRate({}, 0, 1), 0);
}

TEST(Timeline, TrainingStartsAtTheLastPointBeforeTheFirstSample) {
  // Two seconds of start-up, then 1000 samples/s.
  std::vector<TimelinePoint> tl = {{0, 0}, {1, 0}, {2, 0}, {3, 1000}, {4, 2000}, {5, 3000}};
  EXPECT_DOUBLE_EQ(TrainingStart(tl), 2);
  // A window reaching back before training began would count the start-up as slow training.
  EXPECT_DOUBLE_EQ(MeanRate(tl, 0, 5), 600);
  EXPECT_DOUBLE_EQ(RateBefore(tl, 5, 30), 1000) << "the start-up does not count";
  EXPECT_DOUBLE_EQ(RateBefore(tl, 5, 2), 1000);
  // A resumed job's timeline starts at its checkpoint's count.
  EXPECT_DOUBLE_EQ(TrainingStart({{0, 500}, {1, 500}, {2, 900}}), 1);
  EXPECT_DOUBLE_EQ(TrainingStart({{0, 0}, {1, 10}}), 0);
  EXPECT_LT(TrainingStart({}), 0);
}

TEST(Timeline, RateWhileTrainingStopsWhenTheJobFinished) {
  const auto tl = FinishesAtTen();
  EXPECT_DOUBLE_EQ(TrainingEnd(tl), 10);
  // A recovery from t=5 to t=15 outlasted the job: only 5..10 counts.
  EXPECT_DOUBLE_EQ(MeanRateWhileTraining(tl, 5, 15), 1000);
  EXPECT_DOUBLE_EQ(MeanRateWhileTraining(tl, 2, 6), 1000);
  // Still training at the end of the timeline: its end is the last point.
  std::vector<TimelinePoint> growing = {{0, 0}, {1, 10}, {2, 20}};
  EXPECT_DOUBLE_EQ(TrainingEnd(growing), 2);
  EXPECT_LT(MeanRateWhileTraining(tl, 12, 15), 0) << "nothing trained in the window";
}

}  // namespace
}  // namespace ecps
