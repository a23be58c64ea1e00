// A synchronous job (one worker, parameter servers over real gRPC) ends with the same
// weights and optimizer state as the in-process single-threaded reference loop.
#include <atomic>
#include <cmath>

#include "gtest/gtest.h"
#include "kernels/dense_ops.h"
#include "domain/spec_config.h"
#include "tests/test_cluster.h"
#include "worker/local_trainer.h"
#include "worker/training_loop.h"

namespace ecps {
namespace {

// Both runs do the same float operations in the same order with one BLAS thread, so they
// agree far below this; the tolerance only absorbs a different summation order should a
// BLAS kernel choose one.
constexpr float kTolerance = 1e-6f;

void ExpectEquivalent(const JobSpec& spec) {
  SetBlasThreads(1);
  const std::string token = "equivalence";
  auto cluster = TestCluster::Start(spec, token);
  ASSERT_NE(cluster, nullptr);
  auto model = Dlrm::Create(ToDlrmConfig(spec.model), spec.data.batch_size);
  ASSERT_TRUE(model.ok()) << model.status();
  std::vector<int64_t> sizes;
  for (const auto& t : (*model)->tensors()) sizes.push_back(t.size);
  auto ps = PsClient::Create(cluster->map(), spec.model.table_rows, spec.model.embedding_dim,
                             sizes, token, "test-worker", 10000);
  ASSERT_TRUE(ps.ok()) << ps.status();
  ProgressBoard board;
  std::atomic<bool> stop{false};
  TrainingLoop loop(spec, 0, ps->get(), model->get(), &board, &stop);
  ASSERT_TRUE(loop.Train().ok());
  EXPECT_EQ(board.Snapshot().step(), spec.job.steps);

  auto reference = LocalTrainer::Create(spec);
  ASSERT_TRUE(reference.ok()) << reference.status();
  ASSERT_TRUE((*reference)->Train(spec.job.steps).ok());

  auto init = LocalTrainer::Create(spec);  // untouched rows stay at their initial value
  ASSERT_TRUE(init.ok());
  int64_t rows_changed = 0;
  float worst = 0;
  for (int t = 0; t < spec.model.num_sparse; ++t) {
    std::vector<int64_t> rows(spec.model.table_rows[t]);
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int64_t>(i);
    std::vector<float> payloads;
    int pf = 0;
    ASSERT_TRUE((*ps)->ReadPayloads(t, rows, &payloads, &pf).ok());
    ASSERT_EQ(pf, (*reference)->payload_floats());
    for (int64_t r : rows) {
      const float* ref = (*reference)->row_payload(t, r);
      const float* got = payloads.data() + r * pf;
      const float* start = (*init)->row_payload(t, r);
      bool changed = false;
      for (int f = 0; f < pf; ++f) {
        worst = std::max(worst, std::fabs(ref[f] - got[f]));
        changed |= ref[f] != start[f];
      }
      rows_changed += changed;
    }
  }
  EXPECT_LE(worst, kTolerance);
  EXPECT_GT(rows_changed, 100) << "training must have moved many rows for the test to mean much";

  std::vector<std::vector<float>> dense;
  ASSERT_TRUE((*ps)->PullDense(&dense).ok());
  float dense_worst = 0;
  for (size_t i = 0; i < dense.size(); ++i) {
    const auto& ref = (*reference)->dense_tensor(static_cast<int>(i));
    ASSERT_EQ(ref.size(), dense[i].size());
    for (size_t j = 0; j < ref.size(); ++j) {
      dense_worst = std::max(dense_worst, std::fabs(ref[j] - dense[i][j]));
    }
  }
  EXPECT_LE(dense_worst, kTolerance);
}

TEST(Equivalence, OneServerOneWorkerSynchronous) {
  JobSpec spec = SmallSpec(1, 25);
  spec.job.synchronous = true;
  ExpectEquivalent(spec);
}

TEST(Equivalence, ThreeServersRowwiseAdagradAndSgd) {
  JobSpec spec = SmallSpec(3, 20);
  spec.job.synchronous = true;
  spec.optimizer.sparse.type = SparseOptimizerType::kRowwiseAdagrad;
  spec.optimizer.dense.type = DenseOptimizerType::kSgd;
  spec.optimizer.dense.lr = 0.05f;
  ExpectEquivalent(spec);
}

}  // namespace
}  // namespace ecps
