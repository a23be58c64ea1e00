// The online scrub's decisions on their own (ps/online_scrub.h): which member of a stripe the
// code's syndrome blames, when a read counts as caught mid-update rather than a mismatch, and
// the read rate cap. The scrubber against real servers is in tests/online_scrub_test.cc.
#include "ps/online_scrub.h"

#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace ecps {
namespace {

constexpr size_t kBytes = 64;

// A stripe of `code` with random data rows and their parity: n rows of kBytes.
std::vector<std::vector<uint8_t>> Codeword(const RowCode& code, unsigned seed) {
  const int k = code.k(), r = code.r();
  std::mt19937 rng(seed);
  std::vector<std::vector<uint8_t>> rows(k + r, std::vector<uint8_t>(kBytes));
  for (int j = 0; j < k; ++j) {
    for (uint8_t& b : rows[j]) b = static_cast<uint8_t>(rng());
  }
  std::vector<const uint8_t*> data;
  std::vector<uint8_t*> parity;
  for (int j = 0; j < k; ++j) data.push_back(rows[j].data());
  for (int q = 0; q < r; ++q) parity.push_back(rows[k + q].data());
  EXPECT_TRUE(code.Encode(data, parity, kBytes).ok());
  return rows;
}

std::vector<const uint8_t*> Pointers(const std::vector<std::vector<uint8_t>>& rows) {
  std::vector<const uint8_t*> out;
  for (const auto& row : rows) out.push_back(row.data());
  return out;
}

std::unique_ptr<RowCode> Code(FaultToleranceMode mode, int k, int r) {
  auto code = RowCode::Create(mode, k, r, "auto");
  EXPECT_TRUE(code.ok()) << code.status();
  return std::move(*code);
}

TEST(LocateBadMemberTest, ACodewordHasNoBadMember) {
  auto code = Code(FaultToleranceMode::kErasureCode, 4, 2);
  auto rows = Codeword(*code, 1);
  std::vector<uint8_t> fixed;
  EXPECT_EQ(LocateBadMember(*code, Pointers(rows), kBytes, &fixed), -1);
}

TEST(LocateBadMemberTest, WithTwoParityRowsAnyOneFlippedMemberIsFoundAndRestored) {
  auto code = Code(FaultToleranceMode::kErasureCode, 4, 2);
  for (int member = 0; member < 6; ++member) {
    for (int bit : {0, 20, static_cast<int>(8 * kBytes - 1)}) {
      auto rows = Codeword(*code, 7 + member);
      const std::vector<uint8_t> original = rows[member];
      rows[member][bit / 8] ^= uint8_t(1u << (bit % 8));
      std::vector<uint8_t> fixed;
      EXPECT_EQ(LocateBadMember(*code, Pointers(rows), kBytes, &fixed), member)
          << "member " << member << " bit " << bit;
      EXPECT_EQ(fixed, original) << "member " << member << " bit " << bit;
    }
  }
}

TEST(LocateBadMemberTest, ReplicationWithTwoCopiesFindsTheOddOneOut) {
  auto code = Code(FaultToleranceMode::kReplication, 1, 2);
  auto rows = Codeword(*code, 3);
  const std::vector<uint8_t> original = rows[2];
  rows[2][5] ^= 0x10;
  std::vector<uint8_t> fixed;
  EXPECT_EQ(LocateBadMember(*code, Pointers(rows), kBytes, &fixed), 2);
  EXPECT_EQ(fixed, original);
}

TEST(LocateBadMemberTest, OneParityRowCannotLocate) {
  auto code = Code(FaultToleranceMode::kErasureCode, 4, 1);
  for (int member = 0; member < 5; ++member) {
    auto rows = Codeword(*code, 11);
    rows[member][0] ^= 1;
    std::vector<uint8_t> fixed;
    EXPECT_EQ(LocateBadMember(*code, Pointers(rows), kBytes, &fixed), kUnlocatable) << member;
  }
}

// Stripe 0 of a read holding `rows`, every member read, every version `version`.
StripeMembers Read(const std::vector<std::vector<uint8_t>>& rows, int k, uint32_t version) {
  StripeMembers m;
  const int n = static_cast<int>(rows.size());
  m.Reset(1, k, n, kBytes);
  for (int i = 0; i < n; ++i) {
    std::memcpy(m.payload(0, i), rows[i].data(), kBytes);
    m.have[m.slot(0, i)] = 1;
    for (int j = 0; j < k; ++j) m.versions[m.slot(0, i) * k + j] = version;
  }
  return m;
}

TEST(CheckStripeTest, AgreeingVersionsAndBytesAreClean) {
  auto code = Code(FaultToleranceMode::kErasureCode, 2, 2);
  auto rows = Codeword(*code, 5);
  std::vector<uint8_t> scratch;
  EXPECT_EQ(CheckStripe(*code, Read(rows, 2, 3), 0, &scratch), StripeVerdict::kClean);
}

TEST(CheckStripeTest, DifferentBytesAtAgreeingVersionsAreAMismatch) {
  auto code = Code(FaultToleranceMode::kErasureCode, 2, 2);
  auto rows = Codeword(*code, 5);
  rows[1][3] ^= 4;
  std::vector<uint8_t> scratch;
  EXPECT_EQ(CheckStripe(*code, Read(rows, 2, 3), 0, &scratch), StripeVerdict::kMismatch);
}

// The re-read rule: a parity row that has seen one more update of a member than the member
// says it had (a delta on its way, or a forged one) is not a mismatch yet: it is read again,
// under a freeze if it persists.
TEST(CheckStripeTest, DisagreeingVersionsOrAnUnsettledParityAreInFlight) {
  auto code = Code(FaultToleranceMode::kErasureCode, 2, 2);
  auto rows = Codeword(*code, 5);
  rows[0][0] ^= 1;  // bytes differ as well: the versions decide first
  std::vector<uint8_t> scratch;
  StripeMembers ahead = Read(rows, 2, 3);
  ahead.versions[ahead.slot(0, 2) * 2 + 0] = 4;  // parity 0 says member 0 had 4 updates
  EXPECT_EQ(CheckStripe(*code, ahead, 0, &scratch), StripeVerdict::kInFlight);
  StripeMembers unsettled = Read(rows, 2, 3);
  unsettled.settled[unsettled.slot(0, 3)] = 0;
  EXPECT_EQ(CheckStripe(*code, unsettled, 0, &scratch), StripeVerdict::kInFlight);
}

TEST(ScrubPacerTest, EachReadDelaysTheNextByItsBytesOverTheRate) {
  ScrubPacer pacer(2.0);  // 2 MB/s
  const auto t0 = ScrubPacer::Clock::time_point() + std::chrono::hours(1);
  EXPECT_EQ(pacer.Account(t0, 1'000'000), t0 + std::chrono::milliseconds(500));
  // Reads back to back add up.
  EXPECT_EQ(pacer.Account(t0, 1'000'000), t0 + std::chrono::milliseconds(1000));
  // Idle time banks no credit: after a pause the next read pays from now.
  const auto later = t0 + std::chrono::seconds(10);
  EXPECT_EQ(pacer.Account(later, 200'000), later + std::chrono::milliseconds(100));
}

}  // namespace
}  // namespace ecps
