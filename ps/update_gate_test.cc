#include "ps/update_gate.h"

#include <future>
#include <thread>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "runtime/clock.h"

namespace ecps {
namespace {

using std::chrono::milliseconds;

class UpdateGateTest : public ::testing::Test {
 protected:
  UpdateGateTest() : gate_(&clock_, milliseconds(1)) {}

  UpdateGate::Lease Whole(uint64_t id, const std::string& owner, int server = 1,
                          milliseconds lease = milliseconds(30000)) {
    UpdateGate::Lease l;
    l.id = id;
    l.owner = owner;
    l.owner_server = server;
    l.epoch = 4;
    l.duration = lease;
    return l;
  }
  UpdateGate::Lease Stripes(uint64_t id, const std::string& owner,
                            std::vector<uint64_t> keys) {
    UpdateGate::Lease l = Whole(id, owner);
    l.stripes = std::move(keys);
    return l;
  }
  // Whether an update touching `key` may start now (a zero wait).
  bool MayUpdate(uint64_t key) {
    const UpdateGate::Touches touches = [key](const std::function<bool(uint64_t)>& frozen) {
      return frozen(key);
    };
    auto g = gate_.Begin(&touches, milliseconds(0));
    if (!g.ok()) return false;
    gate_.End(*g);
    return true;
  }

  FakeClock clock_;
  UpdateGate gate_;
};

TEST_F(UpdateGateTest, AStripeFreezeHoldsBackOnlyItsStripes) {
  const uint64_t a = UpdateGate::StripeKey(0, 5), b = UpdateGate::StripeKey(1, 5);
  ASSERT_TRUE(gate_.Freeze(Stripes(1, "B", {a}), milliseconds(100)).ok());
  EXPECT_FALSE(MayUpdate(a));
  EXPECT_TRUE(MayUpdate(b));
  auto dense = gate_.Begin(nullptr, milliseconds(0));  // dense updates touch no stripe
  ASSERT_TRUE(dense.ok());
  gate_.End(*dense);
  ASSERT_TRUE(gate_.Release(1, "B").ok());
  EXPECT_TRUE(MayUpdate(a));
}

TEST_F(UpdateGateTest, OnlyTheOwnerReleases) {
  ASSERT_TRUE(gate_.Freeze(Whole(9, "instance-B"), milliseconds(100)).ok());
  EXPECT_TRUE(absl::IsPermissionDenied(gate_.Release(9, "instance-C")));
  EXPECT_TRUE(absl::IsNotFound(gate_.Release(10, "instance-B")));
  EXPECT_FALSE(MayUpdate(UpdateGate::StripeKey(0, 0)));  // still frozen
  ASSERT_TRUE(gate_.Release(9, "instance-B").ok());
  EXPECT_TRUE(MayUpdate(UpdateGate::StripeKey(0, 0)));
  // A repeated release (its answer was lost) is fine; another owner's id is not taken.
  EXPECT_TRUE(gate_.Release(9, "instance-B").ok());
  EXPECT_TRUE(absl::IsPermissionDenied(gate_.Release(9, "instance-C")));
}

TEST_F(UpdateGateTest, AnotherOwnerCannotTakeAnIdInUse) {
  ASSERT_TRUE(gate_.Freeze(Whole(3, "B"), milliseconds(100)).ok());
  EXPECT_TRUE(absl::IsAlreadyExists(gate_.Freeze(Whole(3, "C"), milliseconds(100))));
  ASSERT_TRUE(gate_.Freeze(Whole(3, "B"), milliseconds(100)).ok());  // a retry renews
  EXPECT_EQ(gate_.active(), 1);
  ASSERT_TRUE(gate_.Release(3, "B").ok());
  EXPECT_EQ(gate_.active(), 0);
  EXPECT_TRUE(MayUpdate(0));
}

TEST_F(UpdateGateTest, ALeaseThatRunsOutHoldsNothingBack) {
  ASSERT_TRUE(gate_.Freeze(Whole(5, "B", 1, milliseconds(2000)), milliseconds(100)).ok());
  EXPECT_FALSE(MayUpdate(0));
  clock_.Advance(absl::Milliseconds(1999));
  EXPECT_FALSE(MayUpdate(0));
  clock_.Advance(absl::Milliseconds(1));
  EXPECT_TRUE(MayUpdate(0));
  EXPECT_EQ(gate_.expired(), 1);
  // The owner learns that its consistent point was lost.
  EXPECT_TRUE(absl::IsFailedPrecondition(gate_.Release(5, "B")));
}

TEST_F(UpdateGateTest, AWaitingUpdateGoesOnWhenTheLeaseRunsOut) {
  ASSERT_TRUE(gate_.Freeze(Whole(5, "B", 1, milliseconds(2000)), milliseconds(100)).ok());
  auto waiting = std::async(std::launch::async, [&] {
    const UpdateGate::Touches touches = [](const std::function<bool(uint64_t)>&) {
      return false;
    };
    return gate_.Begin(&touches, milliseconds(60000)).ok();
  });
  EXPECT_EQ(waiting.wait_for(milliseconds(20)), std::future_status::timeout);
  clock_.Advance(absl::Milliseconds(2000));
  EXPECT_TRUE(waiting.get());
}

TEST_F(UpdateGateTest, ReleaseIfDropsADeadOwnersFreezesOnly) {
  ASSERT_TRUE(gate_.Freeze(Whole(1, "dead"), milliseconds(100)).ok());
  ASSERT_TRUE(gate_.Freeze(Stripes(2, "dead", {UpdateGate::StripeKey(0, 1)}), milliseconds(100))
                  .ok());
  ASSERT_TRUE(gate_.Freeze(Stripes(3, "alive", {UpdateGate::StripeKey(0, 2)}), milliseconds(100))
                  .ok());
  auto dropped = gate_.ReleaseIf([](const UpdateGate::Lease& l) { return l.owner == "dead"; });
  EXPECT_EQ(dropped.size(), 2u);
  EXPECT_EQ(gate_.active(), 1);
  EXPECT_TRUE(MayUpdate(UpdateGate::StripeKey(0, 1)));
  EXPECT_FALSE(MayUpdate(UpdateGate::StripeKey(0, 2)));
  EXPECT_TRUE(absl::IsFailedPrecondition(gate_.Release(1, "dead")));
}

TEST_F(UpdateGateTest, HoldsChecksOwnerAndCoverage) {
  const uint64_t a = UpdateGate::StripeKey(0, 1), b = UpdateGate::StripeKey(0, 2),
                 c = UpdateGate::StripeKey(0, 3);
  ASSERT_TRUE(gate_.Freeze(Stripes(4, "B", {b, a}), milliseconds(100)).ok());
  EXPECT_TRUE(gate_.Holds(4, "B", std::vector<uint64_t>{a, b}));
  EXPECT_FALSE(gate_.Holds(4, "B", std::vector<uint64_t>{a, c}));
  EXPECT_FALSE(gate_.Holds(4, "C", std::vector<uint64_t>{a}));
  EXPECT_FALSE(gate_.Holds(5, "B", std::vector<uint64_t>{a}));
  ASSERT_TRUE(gate_.Freeze(Whole(6, "B"), milliseconds(100)).ok());
  EXPECT_TRUE(gate_.Holds(6, "B", std::vector<uint64_t>{c}));
  clock_.Advance(absl::Milliseconds(30000));
  EXPECT_FALSE(gate_.Holds(4, "B", std::vector<uint64_t>{a}));
}

TEST_F(UpdateGateTest, AFreezeWaitsForEarlierUpdatesOnly) {
  auto first = gate_.Begin(nullptr, milliseconds(0));
  ASSERT_TRUE(first.ok());
  auto frozen = std::async(std::launch::async, [&] {
    return gate_.Freeze(Stripes(8, "B", {UpdateGate::StripeKey(2, 2)}), milliseconds(60000));
  });
  EXPECT_EQ(frozen.wait_for(milliseconds(20)), std::future_status::timeout);
  // An update that starts after the freeze and touches none of its stripes does not delay it.
  while (gate_.active() == 0) std::this_thread::yield();
  EXPECT_TRUE(MayUpdate(UpdateGate::StripeKey(2, 3)));
  gate_.End(*first);
  EXPECT_TRUE(frozen.get().ok());
}

TEST_F(UpdateGateTest, AFreezeThatCannotDrainIsDropped) {
  auto stuck = gate_.Begin(nullptr, milliseconds(0));
  ASSERT_TRUE(stuck.ok());
  auto frozen = std::async(std::launch::async,
                           [&] { return gate_.Freeze(Whole(8, "B"), milliseconds(500)); });
  while (gate_.active() == 0) std::this_thread::yield();
  clock_.Advance(absl::Milliseconds(500));
  EXPECT_TRUE(absl::IsDeadlineExceeded(frozen.get()));
  EXPECT_EQ(gate_.active(), 0);
  gate_.End(*stuck);
}

}  // namespace
}  // namespace ecps
