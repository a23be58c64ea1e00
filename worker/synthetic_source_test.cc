// The synthetic data source (worker/synthetic_source.cc): deterministic, seekable and
// partitioned; finite when asked; Zipf-skewed rows and balanced labels; a learnable signal.
#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "gtest/gtest.h"
#include "worker/data.h"

namespace ecps {
namespace {

ModelSection SynthModel(int64_t rows = 100000) {
  ModelSection m;
  m.table_rows.assign(26, rows);
  return m;
}

TEST(Synthetic, DeterministicSeekableAndPartitioned) {
  DataSection d;
  auto a = MakeDataSource(d, SynthModel(), 42, 0, 1, false);
  auto b = MakeDataSource(d, SynthModel(), 42, 0, 1, false);
  auto other = MakeDataSource(d, SynthModel(), 43, 0, 1, false);
  ASSERT_TRUE(a.ok() && b.ok() && other.ok());
  Batch x, y, z;
  ASSERT_TRUE((*a)->Next(64, &x).ok());
  ASSERT_TRUE((*b)->Next(64, &y).ok());
  ASSERT_TRUE((*other)->Next(64, &z).ok());
  EXPECT_EQ(x.dense, y.dense);
  EXPECT_EQ(x.sparse, y.sparse);
  EXPECT_EQ(x.labels, y.labels);
  EXPECT_NE(x.sparse, z.sparse);
  // Seek back and forth.
  ASSERT_TRUE((*a)->Next(64, &x).ok());  // samples 64..127
  EXPECT_EQ((*a)->position(), 128);
  ASSERT_TRUE((*b)->Seek(64).ok());
  ASSERT_TRUE((*b)->Next(64, &y).ok());
  EXPECT_EQ(x.sparse, y.sparse);
  EXPECT_EQ(x.dense, y.dense);
  // Partition 1 of 3, sample k = global sample 3k + 1.
  auto p = MakeDataSource(d, SynthModel(), 42, 1, 3, false);
  ASSERT_TRUE((*p)->Next(10, &z).ok());
  ASSERT_TRUE((*b)->Seek(0).ok());
  ASSERT_TRUE((*b)->Next(30, &y).ok());
  for (int k = 0; k < 10; ++k) {
    EXPECT_TRUE(std::equal(z.sparse.begin() + k * 26, z.sparse.begin() + (k + 1) * 26,
                           y.sparse.begin() + (3 * k + 1) * 26));
  }
  // The held-out stream differs from training.
  auto e = MakeDataSource(d, SynthModel(), 42, 0, 1, true, 100);
  ASSERT_TRUE((*e)->Next(30, &z).ok());
  EXPECT_NE(z.dense, y.dense);
  for (float v : z.dense) EXPECT_GE(v, 0.0f);
}

TEST(Synthetic, FiniteDataSetEnds) {
  DataSection d;
  d.synthetic.num_samples = 10;
  auto p0 = MakeDataSource(d, SynthModel(), 1, 0, 3, false);  // global 0, 3, 6, 9
  auto p2 = MakeDataSource(d, SynthModel(), 1, 2, 3, false);  // global 2, 5, 8
  Batch b;
  auto r = (*p0)->Next(100, &b);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(*r);
  EXPECT_EQ(b.size, 4);
  r = (*p2)->Next(2, &b);
  EXPECT_TRUE(*r);
  r = (*p2)->Next(2, &b);
  EXPECT_FALSE(*r);
  EXPECT_EQ(b.size, 1);
}

TEST(Synthetic, ZipfSkewAndBalancedLabels) {
  DataSection d;  // zipf_s = 1.05
  auto src = MakeDataSource(d, SynthModel(100000), 42, 0, 1, false);
  Batch b;
  const int n = 40000;
  ASSERT_TRUE((*src)->Next(n, &b).ok());
  std::map<int64_t, int> counts;
  for (int s = 0; s < n; ++s) ++counts[b.sparse[s * 26 + 3]];
  std::vector<int> c;
  for (auto& [id, k] : counts) c.push_back(k);
  std::sort(c.rbegin(), c.rend());
  // Zipf(1.05) over 1e5 ranks: P(rank 1) = 1/sum_k k^-1.05 ~ 0.106, rank1/rank2 = 2^1.05.
  EXPECT_NEAR(c[0] / static_cast<double>(n), 0.106, 0.015);
  EXPECT_NEAR(c[0] / static_cast<double>(c[1]), std::pow(2.0, 1.05), 0.3);
  EXPECT_LT(counts.size(), n / 2u);  // uniform ids would be ~all distinct
  double pos = 0;
  for (float y : b.labels) pos += y;
  std::printf("synthetic positive rate: %.3f, top id share %.3f\n", pos / n,
              c[0] / static_cast<double>(n));
  EXPECT_GT(pos / n, 0.25);
  EXPECT_LT(pos / n, 0.6);
}

TEST(Synthetic, CeilingAuc) {
  DataSection d;
  auto ceiling = SyntheticCeilingAuc(d, SynthModel(), 42, 50000);
  ASSERT_TRUE(ceiling.ok());
  std::printf("synthetic ceiling AUC (defaults, 26 x 1e5 rows, 50000 eval samples): %.4f\n",
              *ceiling);
  EXPECT_GT(*ceiling, 0.78);
  EXPECT_LT(*ceiling, 0.92);
}

}  // namespace
}  // namespace ecps
