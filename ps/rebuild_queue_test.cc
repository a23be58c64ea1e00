#include "ps/rebuild_queue.h"

#include <future>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "runtime/clock.h"

namespace ecps {
namespace {

class RebuildQueueTest : public ::testing::Test {
 protected:
  RebuildQueueTest() : queue_(/*max_hint_linger_ms=*/50, &clock_) {}
  void Hint(std::vector<StripeId> stripes) {
    queue_.NoteHint();
    queue_.Add(stripes, /*urgent=*/false);
  }
  size_t Take(int max = 100) {
    batch_.clear();
    return queue_.TakeDue(max, &batch_) ? batch_.size() : 0;
  }

  FakeClock clock_;
  RebuildQueue queue_;
  std::vector<StripeId> batch_;
};

TEST_F(RebuildQueueTest, RowsARequestWaitsForGoAtOnce) {
  EXPECT_EQ(Take(), 0u);
  queue_.Add({{0, 7}, {1, 3}}, /*urgent=*/true);
  ASSERT_EQ(Take(), 2u);
  EXPECT_EQ(batch_[0].table, 0);
  EXPECT_EQ(batch_[0].stripe, 7);
  EXPECT_EQ(batch_[1].table, 1);
}

TEST_F(RebuildQueueTest, WithoutAHintCadenceHintedRowsDoNotLinger) {
  // One hint: the interval between hints is unknown, so there is nothing to wait for.
  Hint({{0, 1}});
  EXPECT_EQ(Take(), 1u);
}

TEST_F(RebuildQueueTest, HintedRowsLingerAboutOneHintInterval) {
  // Hints every 20 ms: hinted rows wait 1.25 * 20 = 25 ms for the next hint to join them.
  for (int i = 0; i < 4; ++i) {
    queue_.NoteHint();
    clock_.Advance(absl::Milliseconds(20));
  }
  Hint({{0, 1}});
  EXPECT_EQ(queue_.HintDeadline(), clock_.Now() + absl::Milliseconds(25));
  clock_.Advance(absl::Milliseconds(20));
  EXPECT_EQ(Take(), 0u) << "lingering for the next hint";
  Hint({{0, 2}});  // joins the first hint's batch; the deadline stays the first hint's
  clock_.Advance(absl::Milliseconds(4));
  EXPECT_EQ(Take(), 0u);
  clock_.Advance(absl::Milliseconds(1));
  EXPECT_EQ(Take(), 2u) << "both hints in one batch at the first one's deadline";
}

TEST_F(RebuildQueueTest, LingeringIsCappedByMaxHintLinger) {
  // Hints every 200 ms would linger 250 ms; the cap is 50 ms.
  for (int i = 0; i < 3; ++i) {
    queue_.NoteHint();
    clock_.Advance(absl::Milliseconds(200));
  }
  Hint({{0, 1}});
  clock_.Advance(absl::Milliseconds(49));
  EXPECT_EQ(Take(), 0u);
  clock_.Advance(absl::Milliseconds(1));
  EXPECT_EQ(Take(), 1u);
}

TEST_F(RebuildQueueTest, AnUrgentRowTakesLingeringHintsAlong) {
  for (int i = 0; i < 3; ++i) {
    queue_.NoteHint();
    clock_.Advance(absl::Milliseconds(20));
  }
  Hint({{0, 1}});
  EXPECT_EQ(Take(), 0u);
  queue_.Add({{0, 9}}, /*urgent=*/true);
  EXPECT_EQ(Take(), 2u);
  // Once the queue is empty it is no longer urgent: the next hint lingers again.
  Hint({{0, 2}});
  EXPECT_EQ(Take(), 0u);
}

TEST_F(RebuildQueueTest, WhatAFullBatchLeavesGoesNext) {
  queue_.Add({{0, 1}, {0, 2}, {0, 3}}, /*urgent=*/true);
  EXPECT_EQ(Take(/*max=*/2), 2u);
  EXPECT_EQ(Take(/*max=*/2), 1u);
  EXPECT_EQ(batch_[0].stripe, 3);
}

TEST_F(RebuildQueueTest, AFailedBatchGoesBackFirstAndAtOnce) {
  for (int i = 0; i < 3; ++i) {
    queue_.NoteHint();
    clock_.Advance(absl::Milliseconds(20));
  }
  Hint({{0, 5}});
  queue_.PutBack({{1, 1}});
  ASSERT_EQ(Take(), 2u);
  EXPECT_EQ(batch_[0].table, 1);
  EXPECT_EQ(batch_[1].stripe, 5);
}

TEST_F(RebuildQueueTest, WaitAndTakeWakesForUrgentRowsAndReturnsFalseOnClose) {
  auto taken = std::async(std::launch::async, [&] {
    std::vector<StripeId> batch;
    return queue_.WaitAndTake(10, &batch) ? batch.size() : size_t{0};
  });
  queue_.Add({{0, 1}}, /*urgent=*/true);
  EXPECT_EQ(taken.get(), 1u);
  auto closed = std::async(std::launch::async, [&] {
    std::vector<StripeId> batch;
    return queue_.WaitAndTake(10, &batch);
  });
  queue_.Close();
  EXPECT_FALSE(closed.get());
}

TEST_F(RebuildQueueTest, HotStripesComeHottestFirstWithoutTheRebuiltOnes) {
  queue_.SetHot({{0, 4}, {0, 2}, {1, 8}, {0, 6}});
  EXPECT_EQ(queue_.hot(), 4u);
  std::vector<StripeId> out;
  queue_.TakeHot(2, [](const StripeId& s) { return s.stripe != 2; }, &out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].stripe, 4);
  EXPECT_EQ(out[1].stripe, 8);
  EXPECT_EQ(queue_.hot(), 1u);
  EXPECT_EQ(queue_.on_demand(), 0u) << "hot stripes are not on-demand work";
}

}  // namespace
}  // namespace ecps
