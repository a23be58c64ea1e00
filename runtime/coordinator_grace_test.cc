#include "runtime/coordinator_grace.h"

#include <chrono>

#include "gtest/gtest.h"
#include "runtime/coordinator_client.h"

namespace ecps {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(CoordinatorGrace, FailedHeartbeatsBackOffAndAnAnswerResets) {
  const auto t0 = CoordinatorGrace::Clock::now();
  CoordinatorGrace grace(milliseconds(200), seconds(10), t0);
  EXPECT_EQ(grace.NextWait(), milliseconds(200));
  grace.Failed(t0);
  EXPECT_EQ(grace.NextWait(), milliseconds(400));
  grace.Failed(t0);
  EXPECT_EQ(grace.NextWait(), milliseconds(800));
  for (int i = 0; i < 40; ++i) grace.Failed(t0);
  EXPECT_EQ(grace.NextWait(), kMaxHeartbeatBackoff);
  grace.Answered(t0 + seconds(1));
  EXPECT_EQ(grace.failures(), 0);
  EXPECT_EQ(grace.NextWait(), milliseconds(200));
}

TEST(CoordinatorGrace, AnIntervalOverTheCapIsKept) {
  const auto t0 = CoordinatorGrace::Clock::now();
  CoordinatorGrace grace(milliseconds(5000), seconds(60), t0);
  grace.Failed(t0);
  EXPECT_EQ(grace.NextWait(), milliseconds(5000));
}

TEST(CoordinatorGrace, LostOnlyAfterTheWholeGraceWithoutAnAnswer) {
  const auto t0 = CoordinatorGrace::Clock::now();
  CoordinatorGrace grace(milliseconds(100), seconds(30), t0);
  grace.Failed(t0 + seconds(29));
  EXPECT_FALSE(grace.Lost(t0 + seconds(29)));
  EXPECT_TRUE(grace.Lost(t0 + seconds(30)));
  // An answer starts the grace again.
  grace.Answered(t0 + seconds(31));
  EXPECT_FALSE(grace.Lost(t0 + seconds(60)));
  EXPECT_TRUE(grace.Lost(t0 + seconds(61)));
  EXPECT_EQ(grace.LostMessage("h:1", t0 + seconds(61)),
            "no answer from the coordinator at h:1 for 30 s (cluster.coordinator_grace_s = 30): "
            "it is not coming back; stopping");
}

TEST(CoordinatorTermFence, ALowerTermThanOneSeenIsRefused) {
  CoordinatorTermFence fence;
  EXPECT_TRUE(fence.Check(1).ok());
  EXPECT_TRUE(fence.Check(0).ok()) << "no term given";
  EXPECT_TRUE(fence.Check(2).ok()) << "a takeover";
  EXPECT_EQ(fence.highest(), 2u);
  const absl::Status deposed = fence.Check(1);
  EXPECT_EQ(deposed.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(deposed.message().find("term 2"), std::string::npos) << deposed;
  EXPECT_TRUE(fence.Check(2).ok());
  EXPECT_EQ(fence.highest(), 2u);
}

TEST(NewerMap, TheTermComesBeforeTheEpoch) {
  auto map = [](uint64_t term, uint64_t epoch) {
    v1::ClusterMap m;
    m.set_term(term);
    m.set_epoch(epoch);
    return m;
  };
  EXPECT_TRUE(NewerMap(map(0, 0), map(1, 1))) << "the first map";
  EXPECT_TRUE(NewerMap(map(1, 3), map(1, 3))) << "same epoch: a newer version";
  EXPECT_TRUE(NewerMap(map(1, 3), map(1, 4)));
  EXPECT_FALSE(NewerMap(map(1, 4), map(1, 3)));
  EXPECT_TRUE(NewerMap(map(1, 4), map(2, 4))) << "a takeover";
  EXPECT_FALSE(NewerMap(map(2, 4), map(1, 5))) << "a deposed coordinator's later epoch";
}

}  // namespace
}  // namespace ecps
