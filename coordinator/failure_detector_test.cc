#include "coordinator/failure_detector.h"

#include "gtest/gtest.h"

namespace ecps {
namespace {

class FailureDetectorTest : public ::testing::Test {
 protected:
  FailureDetectorTest()
      : detector_(&clock_,
                  FailureDetector::Options{absl::Milliseconds(1500), absl::Milliseconds(500)}) {}
  FakeClock clock_;
  FailureDetector detector_;
};

TEST_F(FailureDetectorTest, DeclaresDeadAfterTimeoutAndNotBefore) {
  detector_.Track("a");
  clock_.Advance(absl::Milliseconds(1500));
  EXPECT_TRUE(detector_.Check().empty()) << "dead at exactly the timeout";
  EXPECT_FALSE(detector_.IsDead("a"));
  clock_.Advance(absl::Milliseconds(1));
  std::vector<FailureDetector::Death> deaths = detector_.Check();
  ASSERT_EQ(deaths.size(), 1u);
  EXPECT_EQ(deaths[0].node, "a");
  EXPECT_EQ(deaths[0].silence, absl::Milliseconds(1501));
  EXPECT_FALSE(deaths[0].reported);
  EXPECT_TRUE(detector_.IsDead("a"));
  EXPECT_TRUE(detector_.Check().empty()) << "a death is reported once";
  EXPECT_FALSE(detector_.Heartbeat("a")) << "a dead node cannot come back by heartbeating";
}

TEST_F(FailureDetectorTest, TimeTheCoordinatorWasDeafIsNotHeldAgainstTheNodes) {
  detector_.Track("a");
  clock_.Advance(absl::Milliseconds(1000));
  detector_.Deaf(absl::Milliseconds(2000));
  clock_.Advance(absl::Milliseconds(2500));  // 3.5 s of silence, 1.5 s of it counted
  EXPECT_TRUE(detector_.Check().empty());
  EXPECT_EQ(detector_.deaf_total(), absl::Milliseconds(2000));
  EXPECT_EQ(detector_.SinceHeartbeat("a"), absl::Milliseconds(3500));
  clock_.Advance(absl::Milliseconds(1));
  std::vector<FailureDetector::Death> deaths = detector_.Check();
  ASSERT_EQ(deaths.size(), 1u);
  EXPECT_EQ(deaths[0].silence, absl::Milliseconds(3501)) << "the silence as it was";
  detector_.Deaf(absl::Seconds(10));
  EXPECT_TRUE(detector_.IsDead("a")) << "a verdict is not taken back";
}

// A takeover's grace holds until it is over, heartbeats or not: a node heard from once may
// still be moving between coordinators, its next heartbeats failing and backing off.
TEST_F(FailureDetectorTest, AHeartbeatDoesNotCutATakeoversGraceShort) {
  detector_.Track("a", absl::Seconds(3));
  clock_.Advance(absl::Milliseconds(500));
  ASSERT_TRUE(detector_.Heartbeat("a"));
  clock_.Advance(absl::Milliseconds(2900));  // 2.9 s silent, within the grace's 3 s + 1.5 s
  EXPECT_TRUE(detector_.Check().empty());
  clock_.Advance(absl::Milliseconds(1101));  // 4.501 s after the Track
  std::vector<FailureDetector::Death> deaths = detector_.Check();
  ASSERT_EQ(deaths.size(), 1u);
  EXPECT_EQ(deaths[0].silence, absl::Milliseconds(4001)) << "since its heartbeat";
}

TEST_F(FailureDetectorTest, AGraceIsNotReportedAsNegativeSilence) {
  detector_.Track("a", absl::Seconds(3));
  clock_.Advance(absl::Milliseconds(4501));
  std::vector<FailureDetector::Death> deaths = detector_.Check();
  ASSERT_EQ(deaths.size(), 1u);
  EXPECT_EQ(deaths[0].silence, absl::Milliseconds(4501)) << "silent since it was tracked";
  detector_.Track("b", absl::Seconds(3));
  ASSERT_TRUE(detector_.Suspect("b"));
  ASSERT_TRUE(detector_.Gone("b"));
  deaths = detector_.Check();
  ASSERT_EQ(deaths.size(), 1u);
  EXPECT_EQ(deaths[0].silence, absl::ZeroDuration()) << "gone at once, never negative";
}

TEST_F(FailureDetectorTest, HeartbeatsKeepANodeAlive) {
  detector_.Track("a");
  detector_.Track("b");
  for (int i = 0; i < 10; ++i) {
    clock_.Advance(absl::Milliseconds(1000));
    ASSERT_TRUE(detector_.Heartbeat("a"));
    if (i == 0) {
      std::vector<FailureDetector::Death> deaths = detector_.Check();
      EXPECT_TRUE(deaths.empty());
    }
  }
  std::vector<FailureDetector::Death> deaths = detector_.Check();
  ASSERT_EQ(deaths.size(), 1u);
  EXPECT_EQ(deaths[0].node, "b");
  EXPECT_FALSE(detector_.IsDead("a"));
  EXPECT_EQ(detector_.SinceHeartbeat("a"), absl::ZeroDuration());
}

TEST_F(FailureDetectorTest, FalseReportDoesNotKillAHeartbeatingNode) {
  detector_.Track("a");
  clock_.Advance(absl::Milliseconds(100));
  ASSERT_TRUE(detector_.Suspect("a"));
  EXPECT_TRUE(detector_.IsSuspected("a"));
  EXPECT_TRUE(detector_.Check().empty()) << "heartbeat is fresher than the suspicion timeout";
  clock_.Advance(absl::Milliseconds(200));
  ASSERT_TRUE(detector_.Heartbeat("a"));
  EXPECT_FALSE(detector_.IsSuspected("a")) << "a heartbeat clears the suspicion";
  // Past the suspicion timeout but within the heartbeat timeout: alive, as it is no longer
  // suspected.
  clock_.Advance(absl::Milliseconds(1000));
  EXPECT_TRUE(detector_.Check().empty());
  EXPECT_FALSE(detector_.IsDead("a"));
}

TEST_F(FailureDetectorTest, ReportedNodeWhoseProcessIsGoneDiesAtOnce) {
  detector_.Track("a");
  detector_.Track("b");
  EXPECT_FALSE(detector_.Gone("a")) << "only a reported node can be declared gone";
  ASSERT_TRUE(detector_.Suspect("a"));
  ASSERT_TRUE(detector_.Gone("a"));
  std::vector<FailureDetector::Death> deaths = detector_.Check();  // no time passed
  ASSERT_EQ(deaths.size(), 1u);
  EXPECT_EQ(deaths[0].node, "a");
  EXPECT_TRUE(deaths[0].reported);
  EXPECT_TRUE(deaths[0].gone);
  EXPECT_FALSE(detector_.Gone("a")) << "already dead";

  // A heartbeat after the verdict (the probe was wrong) clears it with the suspicion.
  ASSERT_TRUE(detector_.Suspect("b"));
  ASSERT_TRUE(detector_.Gone("b"));
  ASSERT_TRUE(detector_.Heartbeat("b"));
  EXPECT_TRUE(detector_.Check().empty());
  ASSERT_TRUE(detector_.Suspect("b"));
  EXPECT_TRUE(detector_.Check().empty()) << "suspected again, but not gone";
}

TEST_F(FailureDetectorTest, ReportIsConfirmedByStaleHeartbeatSoonerThanTimeout) {
  detector_.Track("a");
  detector_.Track("b");
  clock_.Advance(absl::Milliseconds(400));
  ASSERT_TRUE(detector_.Suspect("a"));
  EXPECT_TRUE(detector_.Check().empty());
  clock_.Advance(absl::Milliseconds(101));  // 501 ms of silence > suspicion timeout
  std::vector<FailureDetector::Death> deaths = detector_.Check();
  ASSERT_EQ(deaths.size(), 1u);
  EXPECT_EQ(deaths[0].node, "a");
  EXPECT_TRUE(deaths[0].reported);
  EXPECT_FALSE(detector_.IsDead("b")) << "unreported node b keeps the full timeout";
}

TEST_F(FailureDetectorTest, ForgetAndUnknownNodes) {
  EXPECT_FALSE(detector_.Heartbeat("ghost"));
  EXPECT_FALSE(detector_.Suspect("ghost"));
  EXPECT_EQ(detector_.SinceHeartbeat("ghost"), std::nullopt);
  detector_.Track("a");
  detector_.Forget("a");
  clock_.Advance(absl::Seconds(10));
  EXPECT_TRUE(detector_.Check().empty());
}

}  // namespace
}  // namespace ecps
