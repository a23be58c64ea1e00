// The pipelined training loop (TrainingLoop::TrainPipelined) reads batches ahead of the step
// it computes, two ahead of the step it pushes. What it reports (step, samples, reader
// position) must still be the pushed step's, so that a checkpoint or a replacement worker
// resumes at the first sample not yet trained, and a finite partition is trained to its last
// sample exactly once, however far ahead the reader got, its last short batch included.
#include <atomic>
#include <cstdio>
#include <fstream>
#include <functional>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/dlrm.h"
#include "domain/spec_config.h"
#include "tests/poll.h"
#include "tests/test_cluster.h"
#include "worker/training_loop.h"

namespace ecps {
namespace {

// Runs beside Train with its board and stop flag (to stop it while it trains).
using Beside = std::function<void(ProgressBoard* board, std::atomic<bool>* stop)>;

// Trains worker `worker`'s partition against in-process servers; its final progress, and in
// *status (when given) what Train returned, which otherwise must be OK.
v1::WorkerProgress Train(const JobSpec& spec, int worker = 0, absl::Status* status = nullptr,
                         const Beside& beside = nullptr) {
  const std::string token = "pipeline";
  auto cluster = TestCluster::Start(spec, token);
  EXPECT_NE(cluster, nullptr);
  if (cluster == nullptr) return {};
  auto model = Dlrm::Create(ToDlrmConfig(spec.model), spec.data.batch_size);
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
  TrainingLoop loop(spec, worker, ps->get(), model->get(), &board, &stop);
  std::thread side;
  if (beside) side = std::thread(beside, &board, &stop);
  absl::Status s = loop.Train();
  if (side.joinable()) side.join();
  if (status != nullptr) {
    *status = s;
  } else {
    EXPECT_TRUE(s.ok()) << s;
  }
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
    EXPECT_FALSE(p.data_exhausted()) << "an endless stream never runs out";
  }
}

JobSpec CriteoSpec(int batch_size, double eval_fraction) {
  JobSpec spec = SmallSpec(2, 1000);  // more steps than the file holds
  spec.data.source = DataSourceType::kCriteoTsv;
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
  EXPECT_TRUE(p.data_exhausted()) << "13 steps of the 1000 asked";
}

// The partition running out is reported exactly when it leaves the job short of what it
// asked (job.steps full batches), in both loops: 200 rows are 10 batches of 20.
TEST(Pipeline, DataExhaustedOnlyWhenTheFileEndsBeforeJobSteps) {
  for (bool synchronous : {false, true}) {
    for (int64_t steps : {9, 10, 11}) {
      JobSpec spec = CriteoSpec(20, 0);
      spec.job.synchronous = synchronous;
      spec.job.steps = steps;
      const v1::WorkerProgress p = Train(spec);
      EXPECT_EQ(p.step(), std::min<int64_t>(steps, 10));
      EXPECT_EQ(p.data_exhausted(), steps > 10) << steps << " steps, synchronous " << synchronous;
    }
    // A short last batch at the last step asked is short of samples: 13 x 16 = 208 > 200.
    JobSpec spec = CriteoSpec(16, 0);
    spec.job.synchronous = synchronous;
    spec.job.steps = 13;
    const v1::WorkerProgress p = Train(spec);
    EXPECT_EQ(p.step(), 13);
    EXPECT_EQ(p.samples(), 200);
    EXPECT_TRUE(p.data_exhausted());
  }
}

// A model that diverges (a learning rate far too large) stops the worker at the step whose
// loss or gradient is not finite, naming it, instead of pushing NaNs (which the servers
// would refuse anyway) or training on.
TEST(Pipeline, ANonFiniteLossIsAnErrorNamingTheStep) {
  for (bool synchronous : {true, false}) {
    JobSpec spec = SmallSpec(2, 200);
    spec.job.synchronous = synchronous;
    spec.optimizer.dense.type = DenseOptimizerType::kSgd;
    spec.optimizer.dense.lr = 1e30f;
    absl::Status status;
    const v1::WorkerProgress p = Train(spec, 0, &status);
    ASSERT_TRUE(absl::IsInvalidArgument(status)) << status;
    EXPECT_NE(std::string(status.message()).find("not finite"), std::string::npos) << status;
    EXPECT_NE(std::string(status.message()).find("step "), std::string::npos) << status;
    EXPECT_LT(p.step(), 200) << "training stopped at the divergence";
  }
}

// A worker whose partition has nothing to train fails (the job then fails) instead of
// finishing with 0 samples.
class NothingToTrain : public ::testing::Test {
 protected:
  void TearDown() override { std::remove(path_.c_str()); }
  // A TSV file of the given lines of tests/data/criteo_sample.tsv ("" for a malformed line).
  void WriteLines(const std::vector<int>& lines) {
    path_ = ::testing::TempDir() + "/ecps_pipeline_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".tsv";
    std::ifstream in(std::string(ECPS_TEST_DATA_DIR) + "/criteo_sample.tsv");
    std::vector<std::string> sample;
    for (std::string l; std::getline(in, l);) sample.push_back(l);
    std::ofstream out(path_);
    for (int i : lines) out << (i < 0 ? "0\tmalformed" : sample.at(i)) << "\n";
  }
  JobSpec Spec(bool synchronous) const {
    JobSpec spec = CriteoSpec(16, 0);
    spec.data.paths = {path_};
    spec.cluster.workers = 2;
    spec.job.synchronous = synchronous;
    return spec;
  }
  std::string path_;
};

TEST_F(NothingToTrain, AnEmptyPartitionFailsNamingTheData) {
  WriteLines({0});  // one row for two workers: worker 1's partition is empty
  for (bool synchronous : {false, true}) {
    absl::Status status;
    Train(Spec(synchronous), 1, &status);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(std::string(status.message()),
                ::testing::HasSubstr("worker 1 trained 0 samples: its partition (1 of 2 "
                                     "workers) of data.paths [" +
                                     path_ + "] is empty"));
    const v1::WorkerProgress p = Train(Spec(synchronous), 0, &status);
    EXPECT_TRUE(status.ok()) << status;  // worker 0 has its row
    EXPECT_EQ(p.samples(), 1);
  }
}

TEST_F(NothingToTrain, AnAllMalformedPartitionFailsNamingTheFirstLine) {
  WriteLines({0, -1, 1, -1});  // worker 1 reads lines 2 and 4
  for (bool synchronous : {false, true}) {
    absl::Status status;
    const v1::WorkerProgress p = Train(Spec(synchronous), 1, &status);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(std::string(status.message()),
                ::testing::HasSubstr("worker 1 trained 0 samples: all 2 lines of its partition"));
    EXPECT_THAT(std::string(status.message()),
                ::testing::HasSubstr("malformed, the first: " + path_ + ":2: expected 40 columns"));
    // The board carries them for the job's report.
    EXPECT_EQ(p.bad_lines(), 2);
    ASSERT_EQ(p.bad_line_examples_size(), 2);
    EXPECT_EQ(p.bad_line_examples(1), path_ + ":4: expected 40 columns, found 2");
  }
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

// A stop (a signal, or the coordinator's grace running out) that comes right after an
// evaluation, when no push is in flight, ends training with CANCELLED. It used to wait on the
// finished background task, which threw std::future_error and aborted the worker.
TEST(Pipeline, AStopRightAfterAnEvaluationEndsTrainingCleanly) {
  JobSpec spec = SmallSpec(2, 1000000);
  spec.job.eval_every = 1;  // every step evaluates, so every stop comes right after one
  spec.job.eval_samples = 64;
  absl::Status status;
  const v1::WorkerProgress p =
      Train(spec, 0, &status, [](ProgressBoard* board, std::atomic<bool>* stop) {
        EXPECT_TRUE(testing_process::PollUntil([&] { return board->Snapshot().eval_step() >= 3; },
                              std::chrono::seconds(60)));
        stop->store(true);
      });
  EXPECT_TRUE(absl::IsCancelled(status)) << status;
  EXPECT_GE(p.step(), 3);
  EXPECT_LT(p.step(), spec.job.steps);
}

}  // namespace
}  // namespace ecps
