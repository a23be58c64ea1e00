// A one-worker pipelined job (the default) ends with the same weights and optimizer state,
// bit for bit, as the same job with job.synchronous: the pulls a pipelined step sends before
// the previous step's push miss that push, and the worker replays it on what they pulled
// (worker/pipeline_replay.h). Parameter servers over real gRPC; every sparse optimizer, Adam,
// Adagrad and SGD on the dense side, several servers, evaluations between steps, erasure
// coding, and Criteo rows hashed into small tables (collisions), with a short last batch.
#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "coordinator/scrub.h"
#include "gtest/gtest.h"
#include "kernels/dense_ops.h"
#include "domain/spec_config.h"
#include "tests/test_cluster.h"
#include "worker/training_loop.h"

namespace ecps {
namespace {

constexpr char kToken[] = "pipeline-equivalence";

// Everything the servers hold after a job: every row's payload, per table, and every dense
// tensor with its optimizer state and version.
struct Trained {
  std::vector<std::vector<float>> payloads;
  std::vector<std::vector<float>> dense, dense_state;
  std::vector<int64_t> dense_versions;
  v1::WorkerProgress progress;
};

Trained TrainJob(const JobSpec& spec) {
  SetBlasThreads(1);
  Trained out;
  auto cluster = TestCluster::Start(spec, kToken);
  EXPECT_NE(cluster, nullptr);
  if (cluster == nullptr) return out;
  auto model = Dlrm::Create(ToDlrmConfig(spec.model), spec.data.batch_size);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return out;
  std::vector<int64_t> sizes;
  for (const auto& t : (*model)->tensors()) sizes.push_back(t.size);
  auto ps = PsClient::Create(cluster->map(), spec.model.table_rows, spec.model.embedding_dim, sizes,
                             kToken, "test-worker", 10000);
  EXPECT_TRUE(ps.ok()) << ps.status();
  if (!ps.ok()) return out;
  ProgressBoard board;
  std::atomic<bool> stop{false};
  TrainingLoop loop(spec, 0, ps->get(), model->get(), &board, &stop);
  const absl::Status trained = loop.Train();
  EXPECT_TRUE(trained.ok()) << trained;
  out.progress = board.Snapshot();
  for (int t = 0; t < spec.model.num_sparse; ++t) {
    std::vector<int64_t> rows(spec.model.table_rows[t]);
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int64_t>(i);
    int pf = 0;
    out.payloads.emplace_back();
    EXPECT_TRUE((*ps)->ReadPayloads(t, rows, &out.payloads.back(), &pf).ok());
  }
  EXPECT_TRUE((*ps)->PullDense(&out.dense, &out.dense_state, &out.dense_versions).ok());
  if (spec.fault_tolerance.mode == FaultToleranceMode::kErasureCode) {
    std::vector<std::string> addresses;
    for (const auto& s : cluster->map().servers()) addresses.push_back(s.address());
    const v1::ScrubReport report = ScrubServers(addresses, kToken, {1}, 10000);
    EXPECT_TRUE(report.clean()) << "parity after the job: " << report.DebugString();
  }
  return out;
}

// Counts the floats that differ in their bits.
int64_t BitsDiffer(const std::vector<std::vector<float>>& a,
                   const std::vector<std::vector<float>>& b) {
  EXPECT_EQ(a.size(), b.size());
  int64_t differ = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    EXPECT_EQ(a[i].size(), b[i].size()) << i;
    for (size_t j = 0; j < a[i].size() && j < b[i].size(); ++j) {
      differ += std::memcmp(&a[i][j], &b[i][j], sizeof(float)) != 0;
    }
  }
  return differ;
}

void ExpectPipelinedEqualsSynchronous(JobSpec spec) {
  spec.job.synchronous = true;
  const Trained lockstep = TrainJob(spec);
  spec.job.synchronous = false;
  const Trained pipelined = TrainJob(spec);
  ASSERT_FALSE(lockstep.payloads.empty());
  EXPECT_EQ(pipelined.progress.step(), lockstep.progress.step());
  EXPECT_EQ(pipelined.progress.samples(), lockstep.progress.samples());
  EXPECT_EQ(BitsDiffer(pipelined.payloads, lockstep.payloads), 0) << "row payloads";
  EXPECT_EQ(BitsDiffer(pipelined.dense, lockstep.dense), 0) << "dense weights";
  EXPECT_EQ(BitsDiffer(pipelined.dense_state, lockstep.dense_state), 0) << "dense state";
  EXPECT_EQ(pipelined.dense_versions, lockstep.dense_versions);
  EXPECT_EQ(pipelined.progress.eval_logloss(), lockstep.progress.eval_logloss());
  // The job must have trained for the comparison to mean much: many rows moved from their
  // initial values (the servers' InitSparseRow).
  const SparseOptimizerConfig opt = ToSparseOptimizerConfig(spec.optimizer.sparse);
  const int dim = spec.model.embedding_dim, pf = dim + SparseStateFloats(opt, dim);
  std::vector<std::vector<float>> initial(spec.model.num_sparse);
  for (int t = 0; t < spec.model.num_sparse; ++t) {
    const int64_t rows = spec.model.table_rows[t];
    initial[t].resize(rows * pf);
    for (int64_t r = 0; r < rows; ++r) {
      InitSparseRow(opt, spec.job.seed, t, r, dim, rows, initial[t].data() + r * pf);
    }
  }
  EXPECT_GT(BitsDiffer(lockstep.payloads, initial), 1000);
  EXPECT_GT(lockstep.dense_versions.at(0), 10);
}

TEST(PipelineEquivalence, AdagradAndAdamOnTwoServers) {
  JobSpec spec = SmallSpec(2, 25);
  ExpectPipelinedEqualsSynchronous(spec);
}

TEST(PipelineEquivalence, RowwiseAdagradAndSgdWithEvaluationsBetweenSteps) {
  JobSpec spec = SmallSpec(3, 20);
  spec.optimizer.sparse.type = SparseOptimizerType::kRowwiseAdagrad;
  spec.optimizer.dense.type = DenseOptimizerType::kSgd;
  spec.optimizer.dense.lr = 0.05f;
  spec.job.eval_every = 3;  // the pipeline drains and refills around each
  spec.job.eval_samples = 256;
  ExpectPipelinedEqualsSynchronous(spec);
}

TEST(PipelineEquivalence, SparseSgdAndDenseAdagradErasureCoded) {
  JobSpec spec = SmallSpec(3, 20);
  spec.optimizer.sparse.type = SparseOptimizerType::kSgd;
  spec.optimizer.dense.type = DenseOptimizerType::kAdagrad;
  spec.fault_tolerance.mode = FaultToleranceMode::kErasureCode;
  spec.fault_tolerance.k = 2;
  spec.fault_tolerance.r = 1;
  spec.fault_tolerance.dense_replicas = 1;
  ExpectPipelinedEqualsSynchronous(spec);
}

// Real Criteo rows hashed into tables of 50 rows: many values share a row (and most rows are
// in consecutive batches). 200 rows in batches of 16: the last batch is short.
TEST(PipelineEquivalence, CriteoRowsWithHashCollisionsToTheFilesEnd) {
  JobSpec spec = SmallSpec(2, 1000);  // more steps than the file holds
  spec.data.source = DataSourceType::kCriteoTsv;
  spec.data.paths = {std::string(ECPS_TEST_DATA_DIR) + "/criteo_sample.tsv"};
  spec.data.batch_size = 16;
  spec.data.eval_fraction = 0;
  spec.model.table_rows.assign(spec.model.num_sparse, 50);
  ExpectPipelinedEqualsSynchronous(spec);
}

}  // namespace
}  // namespace ecps
