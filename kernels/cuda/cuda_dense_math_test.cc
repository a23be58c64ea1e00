// The CUDA DenseMath against the CPU run of the same kernel bodies (body_dense_math.h). Skips
// without a CUDA device, but for the clear error of asking for more GPUs than there are.
#include "kernels/cuda/cuda_dense_math.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/test_batch.h"

namespace ecps::gpu {
namespace {

using testing::Bodies;
using testing::MakeTestStep;
using testing::MaxRelativeError;
using testing::SmallModel;
using testing::TestOutput;
using testing::TestStep;
using testing::WideModel;

TEST(CudaDenseMath, MoreGpusThanTheMachineHasIsAClearError) {
  std::string error;
  const int have = CudaDeviceCount();
  EXPECT_EQ(CreateCudaDenseMath(SmallModel(), 8, have + 1, &error), nullptr);
  EXPECT_NE(error.find("asked for " + std::to_string(have + 1) + " GPU(s); this machine has " +
                       std::to_string(have)),
            std::string::npos)
      << error;
}

class OnGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() < 1) GTEST_SKIP() << "no CUDA device";
  }
  std::unique_ptr<DenseMath> Cuda(const DlrmConfig& m, int batch, int gpus = 1) {
    std::string error;
    auto math = CreateCudaDenseMath(m, batch, gpus, &error);
    EXPECT_NE(math, nullptr) << error;
    return math;
  }
};

// Every kernel of the step, through the whole step: the GPU's loss, probabilities, dense and
// row gradients agree with the CPU run of the same bodies. The stated tolerance: relative
// 1e-4 (floor 1e-5) for the gradients (cuBLAS sums in its own order), 1e-6 for the loss and
// the probabilities (the GPU's expf and log1pf are within 2 ulp of the CPU's).
void ExpectSameStep(const TestOutput& gpu, const TestOutput& cpu) {
  EXPECT_NEAR(gpu.out.loss, cpu.out.loss, 1e-6 * (1.0 + std::fabs(cpu.out.loss)));
  EXPECT_LT(MaxRelativeError(gpu.probs, cpu.probs, 1e-6), 1e-5);
  for (size_t t = 0; t < cpu.dense.size(); ++t) {
    EXPECT_LT(MaxRelativeError(gpu.dense[t], cpu.dense[t], 1e-5), 1e-4) << "tensor " << t;
  }
  for (size_t t = 0; t < cpu.rows.size(); ++t) {
    EXPECT_LT(MaxRelativeError(gpu.rows[t], cpu.rows[t], 1e-5), 1e-4) << "table " << t;
  }
}

TEST_F(OnGpu, StepMatchesTheBodiesOnTheCpu) {
  for (const DlrmConfig& m : {SmallModel(), WideModel()}) {
    const TestStep s = MakeTestStep(m, 300, 40, 7);
    auto gpu = Cuda(m, 512);
    ASSERT_NE(gpu, nullptr);
    TestOutput g(s), c(s);
    ASSERT_EQ(gpu->TrainStep(s.Input(), &g.out), "");
    ASSERT_EQ(Bodies(m, 512)->TrainStep(s.Input(), &c.out), "");
    ExpectSameStep(g, c);
  }
}

TEST_F(OnGpu, TwoStagedStepsTrainInOrder) {
  const DlrmConfig m = WideModel();
  const TestStep a = MakeTestStep(m, 256, 30, 1), b = MakeTestStep(m, 200, 50, 2);
  auto gpu = Cuda(m, 256);
  ASSERT_NE(gpu, nullptr);
  TestOutput ga(a), gb(b), ca(a), cb(b);
  ASSERT_EQ(gpu->Stage(a.Input()), "");
  ASSERT_EQ(gpu->Stage(b.Input()), "");  // copied while a computes
  EXPECT_NE(gpu->Stage(a.Input()), "");  // a third is refused
  ASSERT_EQ(gpu->Train(a.Input(), &ga.out), "");
  ASSERT_EQ(gpu->Train(b.Input(), &gb.out), "");
  auto cpu = Bodies(m, 256);
  ASSERT_EQ(cpu->TrainStep(a.Input(), &ca.out), "");
  ASSERT_EQ(cpu->TrainStep(b.Input(), &cb.out), "");
  ExpectSameStep(ga, ca);
  ExpectSameStep(gb, cb);
}

TEST_F(OnGpu, PredictMatchesTheTrainingForward) {
  const TestStep s = MakeTestStep(WideModel(), 128, 16, 9);
  auto gpu = Cuda(s.model, 128);
  ASSERT_NE(gpu, nullptr);
  TestOutput g(s);
  ASSERT_EQ(gpu->TrainStep(s.Input(), &g.out), "");
  std::vector<float> probs(s.batch, -1.0f);
  ASSERT_EQ(gpu->Predict(s.Input(), probs.data()), "");
  EXPECT_EQ(probs, g.probs);
}

TEST_F(OnGpu, SeveralGpusSumToOne) {
  const int gpus = std::min(CudaDeviceCount(), 4);
  if (gpus < 2) GTEST_SKIP() << "one CUDA device";
  const TestStep s = MakeTestStep(WideModel(), 301, 60, 4);
  TestOutput one(s), many(s);
  ASSERT_EQ(Cuda(s.model, 512, 1)->TrainStep(s.Input(), &one.out), "");
  ASSERT_EQ(Cuda(s.model, 512, gpus)->TrainStep(s.Input(), &many.out), "");
  ExpectSameStep(many, one);
}

TEST_F(OnGpu, AllReduceIsTimed) {
  double us = -1.0;
  const std::string e = TimeAllReduce(1, 1 << 20, 5, &us);
  if (e == "this build has no NCCL") GTEST_SKIP() << e;
  ASSERT_EQ(e, "");
  EXPECT_GT(us, 0.0);
}

}  // namespace
}  // namespace ecps::gpu
