#include "ps/stripe_snapshot.h"

#include <vector>

#include "gtest/gtest.h"

namespace ecps {
namespace {

// A read of one stripe of k = 2 data members and r = 2 parity members (n = 4).
class StripeSnapshotTest : public ::testing::Test {
 protected:
  StripeSnapshotTest() { read_.Reset(1, 2, 4, 8); }
  void Data(int j, uint32_t version) {
    read_.have[read_.slot(0, j)] = 1;
    read_.versions[read_.slot(0, j) * 2 + j] = version;
  }
  void Parity(int m, uint32_t v0, uint32_t v1, bool settled = true) {
    read_.have[read_.slot(0, m)] = 1;
    read_.versions[read_.slot(0, m) * 2 + 0] = v0;
    read_.versions[read_.slot(0, m) * 2 + 1] = v1;
    read_.settled[read_.slot(0, m)] = settled ? 1 : 0;
  }
  bool Agree(int lost) { return AgreedVersions(read_, 0, lost, absl::MakeSpan(agreed_)); }

  StripeMembers read_;
  std::vector<uint32_t> agreed_ = std::vector<uint32_t>(2, 99);
};

TEST_F(StripeSnapshotTest, MembersThatAgreeAreAConsistentSnapshot) {
  // Data member 0 is lost; member 1 is at version 5 and both parities contain exactly that.
  Data(1, 5);
  Parity(2, 3, 5);
  Parity(3, 3, 5);
  EXPECT_TRUE(Agree(/*lost=*/0));
  // Member 0's version comes from the first parity; member 1 from itself.
  EXPECT_EQ(agreed_[0], 3u);
  EXPECT_EQ(agreed_[1], 5u);
}

TEST_F(StripeSnapshotTest, ADataRowAheadOfItsParityIsCaughtMidUpdate) {
  // Member 1 was updated to 6; the delta has not reached the parity yet.
  Data(1, 6);
  Parity(2, 3, 5);
  EXPECT_FALSE(Agree(/*lost=*/0));
  EXPECT_EQ(agreed_[1], 6u) << "a data member's own version wins";
}

TEST_F(StripeSnapshotTest, ParitiesThatDisagreeAreCaughtMidUpdate) {
  // The lost member 0 is known only to the parities, which saw different updates of it.
  Data(1, 5);
  Parity(2, 3, 5);
  Parity(3, 4, 5);
  EXPECT_FALSE(Agree(/*lost=*/0));
  EXPECT_EQ(agreed_[0], 3u);
}

TEST_F(StripeSnapshotTest, AnUnsettledParityIsNeverConsistent) {
  Data(1, 5);
  Parity(2, 3, 5, /*settled=*/false);
  EXPECT_FALSE(Agree(/*lost=*/0));
}

TEST_F(StripeSnapshotTest, TheLostParityAndUnreadMembersSayNothing) {
  // Parity member 2 is lost: the data members read and parity 3 agree. Parity 2's slot holds
  // stale numbers that must not be looked at.
  Data(0, 7);
  Data(1, 2);
  read_.versions[read_.slot(0, 2) * 2 + 0] = 1;
  Parity(3, 7, 2);
  read_.have[read_.slot(0, 2)] = 0;
  EXPECT_TRUE(Agree(/*lost=*/2));
  // No member read knows data member 1's version: 0.
  StripeMembers only_parity;
  only_parity.Reset(1, 2, 4, 8);
  only_parity.have[only_parity.slot(0, 3)] = 1;
  only_parity.versions[only_parity.slot(0, 3) * 2 + 0] = 4;
  only_parity.versions[only_parity.slot(0, 2) * 2 + 1] = 9;  // parity 2 not read
  std::vector<uint32_t> agreed(2, 99);
  EXPECT_TRUE(AgreedVersions(only_parity, 0, /*lost=*/1, absl::MakeSpan(agreed)));
  EXPECT_EQ(agreed[0], 4u);
  EXPECT_EQ(agreed[1], 0u);
}

TEST_F(StripeSnapshotTest, DecodePlanTakesTheKLowestMembersRead) {
  std::vector<int> ids;
  Parity(3, 0, 0);
  EXPECT_FALSE(DecodePlan(read_, 0, &ids));
  EXPECT_EQ(ids, std::vector<int>({3}));
  Data(1, 0);
  Parity(2, 0, 0);
  ASSERT_TRUE(DecodePlan(read_, 0, &ids));
  EXPECT_EQ(ids, std::vector<int>({1, 2})) << "data before parity, k members only";
}

TEST_F(StripeSnapshotTest, ResetForgetsTheLastRead) {
  Data(1, 5);
  Parity(2, 3, 5, /*settled=*/false);
  read_.Reset(2, 2, 4, 8);
  EXPECT_EQ(read_.have.size(), 8u);
  for (size_t i = 0; i < 2; ++i) {
    for (int m = 0; m < 4; ++m) {
      EXPECT_FALSE(read_.read(i, m));
      EXPECT_EQ(read_.settled[read_.slot(i, m)], 1);
      EXPECT_EQ(read_.says(i, m, 1), 0u);
    }
  }
  EXPECT_EQ(read_.payloads.size(), 2u * 4 * 8);
}

}  // namespace
}  // namespace ecps
