// The pipelined training loop (TrainingLoop::TrainPipelined) reads batches ahead of the step
// it computes, two ahead of the step it pushes. What it reports (step, samples, reader
// position) must still be the pushed step's, so that a checkpoint or a replacement worker
// resumes at the first sample not yet trained, and a finite partition is trained to its last
// sample exactly once, however far ahead the reader got, its last short batch included.
#include <atomic>

#include "gtest/gtest.h"
#include "kernels/dlrm.h"
#include "tests/test_cluster.h"
#include "worker/training_loop.h"

namespace ecps {
namespace {

v1::WorkerProgress Train(const JobSpec& spec) {
  const std::string token = "pipeline";
  auto cluster = TestCluster::Start(spec, token);
  EXPECT_NE(cluster, nullptr);
  if (cluster == nullptr) return {};
  auto model = Dlrm::Create(spec.model, spec.data.batch_size);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return {};
  std::vector<int64_t> sizes;
  for (const auto& t : (*model)->tensors()) sizes.push_back(t.size);
  auto ps = PsClient::Create(cluster->map(), spec.model.table_rows, spec.model.embedding_dim,
                             sizes, token, "test-worker", 10000);
  EXPECT_TRUE(ps.ok()) << ps.status();
  if (!ps.ok()) return {};
  ProgressBoard board;
  std::atomic<bool> stop{false};
  TrainingLoop loop(spec, 0, ps->get(), model->get(), &board, &stop);
  absl::Status s = loop.Train();
  EXPECT_TRUE(s.ok()) << s;
  return board.Snapshot();
}

TEST(Pipeline, ReportsThePushedStepNotHowFarTheReaderGot) {
  for (int64_t steps : {1, 2, 3, 7}) {
    JobSpec spec = SmallSpec(2, steps);
    ASSERT_FALSE(spec.job.synchronous);
    const v1::WorkerProgress p = Train(spec);
    EXPECT_EQ(p.step(), steps);
    EXPECT_EQ(p.samples(), steps * spec.data.batch_size);
    EXPECT_EQ(p.reader_position(), steps * spec.data.batch_size) << steps << " steps";
  }
}

JobSpec CriteoSpec(int batch_size, double eval_fraction) {
  JobSpec spec = SmallSpec(2, 1000);  // more steps than the file holds
  spec.data.source = "criteo_tsv";
  spec.data.paths = {std::string(ECPS_TEST_DATA_DIR) + "/criteo_sample.tsv"};  // 200 rows
  spec.data.batch_size = batch_size;
  spec.data.eval_fraction = eval_fraction;
  return spec;
}

TEST(Pipeline, TrainsAFiniteFileToItsLastSampleOnce) {
  // 200 rows in batches of 16: 12 full batches and a short one of 8, which comes with the
  // reader's end-of-data; the reader runs into the end while batches are still ahead.
  const v1::WorkerProgress p = Train(CriteoSpec(16, 0));
  EXPECT_EQ(p.step(), 13);
  EXPECT_EQ(p.samples(), 200);
  EXPECT_EQ(p.reader_position(), 200);
}

TEST(Pipeline, EvaluatesAHeldOutSplitShorterThanABatch) {
  // Every 20th row held out: 10 rows for evaluation, 190 for training (11 batches of 16
  // and one of 14). The 10 held-out rows are a single short batch.
  const v1::WorkerProgress p = Train(CriteoSpec(16, 0.05));
  EXPECT_EQ(p.samples(), 190);
  EXPECT_EQ(p.step(), 12);
  EXPECT_EQ(p.eval_step(), 12) << "the final evaluation, at the last step trained";
  EXPECT_GT(p.eval_logloss(), 0);
}

}  // namespace
}  // namespace ecps
