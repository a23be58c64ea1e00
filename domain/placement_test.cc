#include "domain/placement.h"

#include <algorithm>
#include <set>
#include <tuple>

#include "gtest/gtest.h"

namespace ecps {
namespace {

class PlacementTest : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

TEST_P(PlacementTest, RoundTripsDistinctServersAndBalance) {
  auto [servers, k, r] = GetParam();
  std::vector<int64_t> rows = {1, 7, 1000, 12345};
  auto p = Placement::Create(servers, k, r, rows);
  ASSERT_TRUE(p.ok()) << p.status();
  for (int t = 0; t < p->num_tables(); ++t) {
    std::vector<int64_t> data_per_server(servers, 0), parity_per_server(servers, 0);
    std::set<std::pair<int, int64_t>> used_data, used_parity;
    for (int64_t s = 0; s < p->stripes(t); ++s) {
      std::set<int> members;
      for (int m = 0; m < p->n(); ++m) {
        int server = p->ServerOf(t, s, m);
        members.insert(server);
        EXPECT_EQ(p->MemberAt(t, s, server), m);
      }
      EXPECT_EQ(static_cast<int>(members.size()), p->n()) << "stripe members not distinct";
      for (int q = 0; q < r; ++q) {
        MemberLocation loc = p->ParityLocation(t, s, q);
        ASSERT_LT(loc.slot, p->ParitySlots(t));
        EXPECT_TRUE(used_parity.insert({loc.server, loc.slot}).second);
        int back_q = -1;
        EXPECT_EQ(p->StripeAtParitySlot(t, loc.server, loc.slot, &back_q), s);
        EXPECT_EQ(back_q, q);
        ++parity_per_server[loc.server];
      }
    }
    for (int64_t row = 0; row < p->rows(t); ++row) {
      MemberLocation loc = p->DataLocation(t, row);
      ASSERT_GE(loc.server, 0);
      ASSERT_LT(loc.slot, p->DataSlots(t));
      EXPECT_TRUE(used_data.insert({loc.server, loc.slot}).second) << "slot reused";
      EXPECT_EQ(p->RowAtDataSlot(t, loc.server, loc.slot), row);
      ++data_per_server[loc.server];
    }
    // Balance: every server within one block's worth (k data rows, r parity rows) of the
    // mean, so no server carries a share that grows with the table.
    auto [dmin, dmax] = std::minmax_element(data_per_server.begin(), data_per_server.end());
    EXPECT_LE(*dmax - *dmin, static_cast<int64_t>(k)) << "table " << t;
    if (r > 0) {
      auto [pmin, pmax] =
          std::minmax_element(parity_per_server.begin(), parity_per_server.end());
      EXPECT_LE(*pmax - *pmin, static_cast<int64_t>(r)) << "table " << t;
    }
    for (int s = 0; s < servers; ++s) {
      EXPECT_EQ(p->DataRowsOn(t, s), data_per_server[s]);
      EXPECT_EQ(p->ParityRowsOn(t, s), parity_per_server[s]);
    }
  }
}

// Includes cases where S and n share a factor (6 and 3, 8 and 4), which pin parity to a few
// servers in ECRec's layout.
INSTANTIATE_TEST_SUITE_P(Codes, PlacementTest,
                         ::testing::Values(std::make_tuple(1, 1, 0), std::make_tuple(3, 1, 0),
                                           std::make_tuple(3, 2, 1), std::make_tuple(5, 4, 1),
                                           std::make_tuple(6, 2, 1), std::make_tuple(6, 4, 2),
                                           std::make_tuple(8, 2, 2), std::make_tuple(7, 3, 2),
                                           std::make_tuple(4, 1, 2), std::make_tuple(16, 10, 4)));

TEST(Placement, RejectsBadArguments) {
  EXPECT_FALSE(Placement::Create(3, 3, 1, {10}).ok());
  EXPECT_FALSE(Placement::Create(3, 0, 1, {10}).ok());
  EXPECT_FALSE(Placement::Create(3, 1, -1, {10}).ok());
  EXPECT_FALSE(Placement::Create(3, 1, 1, {0}).ok());
}

// The count of unrecoverable stripes against a brute-force walk over every stripe.
TEST(Placement, UnrecoverableCountsStripesWithMoreThanRMembersLost) {
  for (auto [servers, k, r] : {std::make_tuple(5, 4, 1), std::make_tuple(6, 2, 2),
                               std::make_tuple(7, 3, 2), std::make_tuple(3, 1, 1)}) {
    auto p = Placement::Create(servers, k, r, {101, 7, 64});
    ASSERT_TRUE(p.ok());
    for (int a = 0; a < servers; ++a) {
      for (int b = a; b < servers; ++b) {
        for (int c = b; c < servers; ++c) {
          std::vector<int> lost = {a, b, c};
          lost.erase(std::unique(lost.begin(), lost.end()), lost.end());
          std::vector<Placement::Loss> got = p->Unrecoverable(lost);
          size_t at = 0;
          for (int t = 0; t < p->num_tables(); ++t) {
            int64_t count = 0, first = -1;
            for (int64_t s = 0; s < p->stripes(t); ++s) {
              int missing = 0;
              for (int m = 0; m < p->n(); ++m) {
                missing += std::count(lost.begin(), lost.end(), p->ServerOf(t, s, m)) > 0;
              }
              if (missing > r) {
                ++count;
                if (first < 0) first = s;
              }
            }
            if (count == 0) continue;
            ASSERT_LT(at, got.size()) << "table " << t;
            EXPECT_EQ(got[at].table, t);
            EXPECT_EQ(got[at].stripes, count) << servers << " " << k << " " << r << " table " << t;
            EXPECT_EQ(got[at].first_stripe, first);
            ++at;
          }
          EXPECT_EQ(at, got.size());
          if (static_cast<int>(lost.size()) <= r) {
            EXPECT_TRUE(got.empty());
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace ecps
