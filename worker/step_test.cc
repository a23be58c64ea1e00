#include "worker/step.h"

#include <map>
#include <random>

#include "gtest/gtest.h"

namespace ecps {
namespace {

// Batch of 3 samples, 2 tables: table 0 ids {7, 3, 7}, table 1 ids {5, 5, 5}.
Batch HandBatch() {
  Batch b;
  b.size = 3;
  b.sparse = {7, 5, 3, 5, 7, 5};
  b.dense.assign(3, 0.0f);
  b.labels = {0, 1, 0};
  return b;
}

TEST(Step, DedupeSortsAndIndexes) {
  UniqueIds u;
  Dedupe(HandBatch(), 2, &u);
  ASSERT_EQ(u.rows.size(), 2u);
  EXPECT_EQ(u.rows[0], (std::vector<int64_t>{3, 7}));
  EXPECT_EQ(u.rows[1], (std::vector<int64_t>{5}));
  EXPECT_EQ(u.index, (std::vector<int32_t>{1, 0, 0, 0, 1, 0}));
  EXPECT_EQ(u.total_rows(), 3);
  // Reuse with a smaller batch.
  Batch b;
  b.size = 1;
  b.sparse = {9, 2};
  Dedupe(b, 2, &u);
  EXPECT_EQ(u.rows[0], (std::vector<int64_t>{9}));
  EXPECT_EQ(u.rows[1], (std::vector<int64_t>{2}));
  EXPECT_EQ(u.index, (std::vector<int32_t>{0, 0}));
}

// Dedupe against a plain reference (std::map) on random batches: sizes around powers of two,
// narrow and wide ids (up to 63 bits, which takes the comparison-sort path) and heavy
// repetition.
TEST(Step, DedupeMatchesReferenceOnRandomBatches) {
  std::mt19937_64 rng(5);
  UniqueIds u;
  for (int batch : {1, 2, 3, 255, 256, 257, 2048, 3000}) {
    for (int id_bits : {1, 8, 17, 40, 56, 63}) {
      const int ns = 3;
      Batch b;
      b.size = batch;
      b.sparse.resize(static_cast<size_t>(batch) * ns);
      const uint64_t range = id_bits == 63 ? (uint64_t{1} << 63) - 1 : uint64_t{1} << id_bits;
      for (auto& id : b.sparse) id = static_cast<int64_t>(rng() % range);
      Dedupe(b, ns, &u);
      for (int t = 0; t < ns; ++t) {
        std::map<int64_t, int32_t> unique;
        for (int s = 0; s < batch; ++s) unique.emplace(b.sparse[s * ns + t], 0);
        std::vector<int64_t> want;
        for (auto& [id, pos] : unique) {
          pos = static_cast<int32_t>(want.size());
          want.push_back(id);
        }
        ASSERT_EQ(u.rows[t], want) << "batch " << batch << " id bits " << id_bits;
        for (int s = 0; s < batch; ++s) {
          ASSERT_EQ(u.index[s * ns + t], unique.at(b.sparse[s * ns + t]))
              << "batch " << batch << " id bits " << id_bits << " sample " << s;
        }
      }
    }
  }
}

TEST(Step, PoolAndAggregate) {
  UniqueIds u;
  Dedupe(HandBatch(), 2, &u);
  const int dim = 2;
  const std::vector<float> t0 = {30, 31, 70, 71};  // rows 3, 7
  const std::vector<float> t1 = {50, 51};          // row 5
  std::vector<float> pooled(3 * 2 * dim);
  PoolEmbeddings(u, {t0.data(), t1.data()}, 3, 2, dim, pooled.data());
  EXPECT_EQ(pooled, (std::vector<float>{70, 71, 50, 51, 30, 31, 50, 51, 70, 71, 50, 51}));

  // d_pooled: slot s*2+t gets (s+1)*(t+1) * {1, 10}.
  std::vector<float> d(3 * 2 * dim);
  for (int s = 0; s < 3; ++s)
    for (int t = 0; t < 2; ++t) {
      d[(s * 2 + t) * dim] = (s + 1) * (t + 1);
      d[(s * 2 + t) * dim + 1] = 10.0f * (s + 1) * (t + 1);
    }
  std::vector<std::vector<float>> g;
  AggregateRowGrads(u, d.data(), 3, 2, dim, &g);
  // table 0: row 3 <- sample 1 (2); row 7 <- samples 0, 2 (1 + 3 = 4).
  EXPECT_EQ(g[0], (std::vector<float>{2, 20, 4, 40}));
  // table 1: row 5 <- all samples: 2 + 4 + 6 = 12.
  EXPECT_EQ(g[1], (std::vector<float>{12, 120}));
}

}  // namespace
}  // namespace ecps
