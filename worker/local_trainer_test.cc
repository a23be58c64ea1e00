#include "worker/local_trainer.h"

#include <chrono>
#include <cmath>
#include <cstdlib>

#include "gtest/gtest.h"
#include "kernels/optimizers.h"
#include "domain/spec_config.h"

namespace ecps {
namespace {

// A small synthetic job: 26 tables of 5000 rows, dim 8, batch 256.
JobSpec SmallJob() {
  JobSpec s;
  s.job.seed = 42;
  s.job.eval_samples = 20000;
  s.model.embedding_dim = 8;
  s.model.bottom_mlp = {32, 8};
  s.model.top_mlp = {32, 16};
  s.model.table_rows.assign(26, 5000);
  s.data.batch_size = 256;
  s.optimizer.sparse.type = SparseOptimizerType::kAdagrad;
  s.optimizer.sparse.lr = 0.05f;
  s.optimizer.dense.type = DenseOptimizerType::kAdam;
  s.optimizer.dense.lr = 0.003f;
  return s;
}

TEST(LocalTrainer, LearnsSyntheticData) {
  const JobSpec spec = SmallJob();
  auto t = LocalTrainer::Create(spec);
  ASSERT_TRUE(t.ok()) << t.status();
  auto before = (*t)->Evaluate();
  ASSERT_TRUE(before.ok());
  EXPECT_EQ(before->samples, 20000);
  EXPECT_NEAR(before->auc, 0.5, 0.08);
  const int steps =
      std::getenv("ECPS_LEARN_STEPS") ? std::atoi(std::getenv("ECPS_LEARN_STEPS")) : 600;
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE((*t)->Train(steps).ok());
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  auto after = (*t)->Evaluate();
  ASSERT_TRUE(after.ok());
  auto ceiling = SyntheticCeilingAuc(spec.data, spec.model, spec.job.seed, 20000);
  ASSERT_TRUE(ceiling.ok());
  std::printf(
      "trained %d steps in %.2fs (%.0f samples/s): auc %.4f -> %.4f, logloss %.4f -> "
      "%.4f; ceiling %.4f\n",
      steps, secs, (*t)->samples_per_second(), before->auc, after->auc, before->logloss,
      after->logloss, *ceiling);
  EXPECT_GE(after->auc, 0.70);
  EXPECT_LT(after->logloss, before->logloss);
  EXPECT_LT(after->auc, *ceiling);
}

TEST(LocalTrainer, DeterministicAndLazyInitMatchesInitSparseRow) {
  JobSpec spec = SmallJob();
  spec.model.table_rows.assign(26, 300);
  spec.optimizer.sparse.type = SparseOptimizerType::kRowwiseAdagrad;
  auto a = LocalTrainer::Create(spec);
  auto b = LocalTrainer::Create(spec);
  ASSERT_TRUE(a.ok() && b.ok());
  // A row nobody touched equals InitSparseRow.
  std::vector<float> init((*a)->payload_floats());
  InitSparseRow(ToSparseOptimizerConfig(spec.optimizer.sparse), spec.job.seed, 5, 17, 8, 300,
                init.data());
  EXPECT_TRUE(std::equal(init.begin(), init.end(), (*a)->row_payload(5, 17)));
  ASSERT_TRUE((*a)->Train(5).ok());
  ASSERT_TRUE((*b)->Train(5).ok());
  EXPECT_EQ((*a)->steps(), 5);
  EXPECT_EQ((*a)->samples(), 5 * 256);
  for (int t = 0; t < 26; ++t)
    for (int64_t r = 0; r < 300; ++r)
      ASSERT_TRUE(std::equal((*a)->row_payload(t, r), (*a)->row_payload(t, r) + 9,
                             (*b)->row_payload(t, r)));
  for (size_t i = 0; i < (*a)->model().tensors().size(); ++i) {
    EXPECT_EQ((*a)->dense_tensor(i), (*b)->dense_tensor(i));
    EXPECT_EQ((*a)->dense_state(i), (*b)->dense_state(i));
  }
  // Training moved some rows and the dense weights.
  int moved = 0;
  for (int64_t r = 0; r < 300; ++r) {
    InitSparseRow(ToSparseOptimizerConfig(spec.optimizer.sparse), spec.job.seed, 0, r, 8, 300,
                  init.data());
    moved += !std::equal(init.begin(), init.end(), (*a)->row_payload(0, r));
  }
  EXPECT_GT(moved, 10);
  std::vector<std::vector<float>> d0;
  (*a)->model().InitDense(spec.job.seed, &d0);
  EXPECT_NE(d0[0], (*a)->dense_tensor(0));
}

TEST(LocalTrainer, StepOnBatchEqualsStep) {
  JobSpec spec = SmallJob();
  spec.model.table_rows.assign(26, 1000);
  auto a = LocalTrainer::Create(spec);
  auto b = LocalTrainer::Create(spec);
  auto src = MakeDataSource(spec.data, spec.model, spec.job.seed, 0, 1, false);
  ASSERT_TRUE(a.ok() && b.ok() && src.ok());
  Batch batch;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE((*src)->Next(256, &batch).ok());
    auto la = (*a)->Step();
    ASSERT_TRUE(la.ok());
    EXPECT_EQ(*la, (*b)->StepOnBatch(batch));
  }
  EXPECT_EQ((*a)->dense_tensor(4), (*b)->dense_tensor(4));
}

TEST(LocalTrainer, CreateRejectsBadConfig) {
  JobSpec spec = SmallJob();
  spec.optimizer.sparse.lr = 0;  // the kernels refuse a rate that is not positive
  EXPECT_EQ(LocalTrainer::Create(spec).status().code(), absl::StatusCode::kInvalidArgument);
  spec = SmallJob();
  spec.model.bottom_mlp = {32, 16};
  EXPECT_EQ(LocalTrainer::Create(spec).status().code(), absl::StatusCode::kInvalidArgument);
  spec = SmallJob();
  spec.model.table_rows.clear();
  EXPECT_EQ(LocalTrainer::Create(spec).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(LocalTrainer, TrainsOnCriteoSampleWithEpochs) {
  JobSpec spec = SmallJob();
  spec.data.source = DataSourceType::kCriteoCsv;
  spec.data.paths = {std::string(ECPS_TEST_DATA_DIR) + "/criteo_sample.txt"};
  spec.data.batch_size = 64;
  spec.data.eval_fraction = 0.1;
  auto t = LocalTrainer::Create(spec);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE((*t)->Train(10).ok());  // 180 training rows: wraps around twice
  EXPECT_EQ((*t)->samples(), 64 * 2 + 52 + 64 * 2 + 52 + 64 * 2 + 52 + 64);
  auto r = (*t)->Evaluate();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->samples, 20);
}

}  // namespace
}  // namespace ecps
