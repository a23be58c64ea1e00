// worker.abft_max_detections: a worker whose checked GEMMs keep failing stops with an error of
// kind kUnhealthyWorker (the coordinator then replaces it, coordinator/recovery_test.cc). No
// step that failed its checks is pushed, the steps before it are reported, and the detections
// are counted on the progress board. Parameter servers over real gRPC, both training loops.
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/abft.h"
#include "domain/spec_config.h"
#include "runtime/error_kind.h"
#include "tests/test_cluster.h"
#include "worker/training_loop.h"

namespace ecps {
namespace {

constexpr char kToken[] = "unhealthy-worker";

// Flips a high bit of the first weight gradient's output on the calls `pattern` picks
// (counting every computation of it, 1-based: a step's, a recomputed step's, and the run that
// confirms a miss, kernels/abft.h ConfirmMiss). Nothing follows that GEMM, so no ReLU can
// erase the flip (a forward output's flip can be: then it is cleared, not detected).
class FlipCalls : public GemmFaultInjector {
 public:
  explicit FlipCalls(std::function<bool(int call)> pattern) : pattern_(std::move(pattern)) {}
  bool Inject(int site, const GemmCall&, GemmFault* fault) override {
    if (site != 1) return false;
    if (!pattern_(++calls_)) return false;
    *fault = {GemmFault::kOutput, 0, 30};
    return true;
  }

 private:
  std::function<bool(int)> pattern_;
  int calls_ = 0;
};

struct Outcome {
  absl::Status trained;
  v1::WorkerProgress progress;
  int64_t dense_version = -1;  // tensor 0's updates on its server: the steps pushed
};

Outcome Train(JobSpec spec, FlipCalls* flip) {
  Outcome out;
  auto cluster = TestCluster::Start(spec, kToken);
  EXPECT_NE(cluster, nullptr);
  if (cluster == nullptr) return out;
  auto model = Dlrm::Create(ToDlrmConfig(spec.model), spec.data.batch_size);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return out;
  (*model)->SetAbft(AbftMode::kDetect, MachineBalance{}, flip);
  std::vector<int64_t> sizes;
  for (const auto& t : (*model)->tensors()) sizes.push_back(t.size);
  auto ps = PsClient::Create(cluster->map(), spec.model.table_rows, spec.model.embedding_dim, sizes,
                             kToken, "test-worker", 10000);
  EXPECT_TRUE(ps.ok()) << ps.status();
  if (!ps.ok()) return out;
  ProgressBoard board;
  std::atomic<bool> stop{false};
  TrainingLoop loop(spec, 0, ps->get(), model->get(), &board, &stop);
  out.trained = loop.Train();
  out.progress = board.Snapshot();
  std::vector<std::vector<float>> dense, state;
  std::vector<int64_t> versions;
  EXPECT_TRUE((*ps)->PullDense(&dense, &state, &versions).ok());
  if (!versions.empty()) out.dense_version = versions[0];
  return out;
}

class UnhealthyWorker : public ::testing::TestWithParam<bool> {
 protected:
  JobSpec Spec() const {
    JobSpec spec = SmallSpec(2, 12);
    spec.job.synchronous = GetParam();
    spec.worker.abft = AbftSetting::kDetect;
    return spec;
  }
};

// Steps 1, 2, 3 compute once each (calls 1-3); steps 4, 6 and 8 are computed again: their
// first computation (calls 4, 8, 12) is flipped, the run confirming the miss (5, 9) and the
// recomputed step (6, 10) are not. The third of them ends the worker.
TEST_P(UnhealthyWorker, StopsAtTheThirdDetectionWithNothingBadPushed) {
  FlipCalls flip([](int call) { return call == 4 || call == 8 || call == 12; });
  const Outcome out = Train(Spec(), &flip);
  ASSERT_TRUE(HasErrorKind(out.trained, ErrorKind::kUnhealthyWorker)) << out.trained;
  EXPECT_NE(out.trained.message().find("3 steps computed again"), std::string::npos)
      << out.trained;
  EXPECT_EQ(out.progress.abft_detections(), 3);
  // Step 8 computed correctly the second time but was not pushed: the worker stops first.
  EXPECT_EQ(out.progress.step(), 7) << "every step before the one that ended it is reported";
  EXPECT_EQ(out.dense_version, 7) << "the steps pushed are the steps reported";
}

TEST_P(UnhealthyWorker, AStepThatAlwaysFailsEndsTheWorker) {
  FlipCalls flip([](int call) { return call >= 3; });  // step 3 onwards, every attempt
  const Outcome out = Train(Spec(), &flip);
  ASSERT_TRUE(HasErrorKind(out.trained, ErrorKind::kUnhealthyWorker)) << out.trained;
  EXPECT_NE(out.trained.message().find("step 3 failed its GEMM checksums every time"),
            std::string::npos)
      << out.trained;
  EXPECT_EQ(out.progress.step(), 2);
  EXPECT_EQ(out.dense_version, 2);
}

TEST_P(UnhealthyWorker, ZeroMaxDetectionsNeverStopsTheWorker) {
  JobSpec spec = Spec();
  spec.worker.abft_max_detections = 0;
  // Every step after the first computed twice: its first run flipped (calls 2, 5, 8, ...), the
  // run confirming the miss clean, the recomputed step clean.
  FlipCalls flip([](int call) { return call % 3 == 2; });
  const Outcome out = Train(spec, &flip);
  EXPECT_TRUE(out.trained.ok()) << out.trained;
  EXPECT_EQ(out.progress.step(), 12);
  EXPECT_EQ(out.dense_version, 12);
  EXPECT_GE(out.progress.abft_detections(), 11);
}

INSTANTIATE_TEST_SUITE_P(Loops, UnhealthyWorker, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "Synchronous" : "Pipelined";
                         });

}  // namespace
}  // namespace ecps
