// The CUDA DenseMath against the CPU run of the same kernel bodies (body_dense_math.h). Skips
// without a CUDA device, but for the clear error of asking for more GPUs than there are.
#include "kernels/cuda/cuda_dense_math.h"

#include <cuda_runtime.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/abft.h"
#include "kernels/cuda/test_batch.h"
#include "kernels/cuda/train_kernels.h"

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

// The dense optimizers' kernels against their bodies run on the CPU: the same bits (the
// bodies are plain multiplies, adds, a division and sqrtf, all IEEE-rounded on both sides
// with --fmad=false).
TEST_F(OnGpu, DenseUpdatesMatchTheBodiesOnTheCpu) {
  const int64_t n = 5000;
  std::vector<float> grad(n), w0(n);
  for (int64_t i = 0; i < n; ++i) {
    grad[i] = 0.01f * static_cast<float>((i * 37) % 101 - 50);
    w0[i] = 0.001f * static_cast<float>((i * 11) % 997 - 498);
  }
  for (auto kind : {DenseUpdateRule::kSgd, DenseUpdateRule::kAdagrad, DenseUpdateRule::kAdam}) {
    DenseUpdateRule rule;
    rule.kind = kind;
    std::vector<float> w = w0, state(2 * n, 0.0f);
    float *d_grad = nullptr, *d_w = nullptr, *d_state = nullptr;
    ASSERT_EQ(cudaMalloc(&d_grad, n * sizeof(float)), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&d_w, n * sizeof(float)), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&d_state, 2 * n * sizeof(float)), cudaSuccess);
    cudaMemcpy(d_grad, grad.data(), n * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemcpy(d_w, w.data(), n * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemcpy(d_state, state.data(), 2 * n * sizeof(float), cudaMemcpyHostToDevice);
    for (int64_t step = 1; step <= 3; ++step) {
      ASSERT_EQ(ApplyDenseUpdateAsync(rule, step, n, d_grad, d_w, d_state, nullptr), "");
      float c1 = 0, c2 = 0;
      AdamCorrections(rule.beta1, rule.beta2, step, &c1, &c2);
      ForEachIndex(n, [&](int64_t i) {
        switch (kind) {
          case DenseUpdateRule::kSgd:
            SgdAt(i, rule.lr, grad.data(), w.data());
            break;
          case DenseUpdateRule::kAdagrad:
            AdagradAt(i, rule.lr, rule.eps, grad.data(), w.data(), state.data());
            break;
          case DenseUpdateRule::kAdam:
            AdamAt(i, rule.lr, rule.beta1, rule.beta2, rule.eps, c1, c2, grad.data(), w.data(),
                   state.data(), state.data() + n);
            break;
        }
      });
    }
    std::vector<float> got(n);
    ASSERT_EQ(cudaMemcpy(got.data(), d_w, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(got, w) << "rule " << kind;
    cudaFree(d_grad);
    cudaFree(d_w);
    cudaFree(d_state);
  }
}

// --- ABFT (DenseMath::SetAbft) on the GPU. These never ran where they were written (no GPU
// there): the checks' bodies and the recompute are tested on the CPU (body_abft_test.cc).

// Flips `bit` of output element 3 of GEMM `site`, the first `times` times it runs (the
// injector sees device pointers, so the element is chosen by index).
class FlipTimes : public GemmFaultInjector {
 public:
  FlipTimes(int site, int bit, int times) : site_(site), bit_(bit), left_(times) {}
  bool Inject(int site, const GemmCall&, GemmFault* fault) override {
    if (site != site_ || left_ == 0) return false;
    --left_;
    *fault = {GemmFault::kOutput, 3, bit_};
    return true;
  }
  bool used() const { return left_ == 0; }

 private:
  int site_, bit_, left_;
};

// Clean steps raise nothing, and agree with the bodies' (the forward's epilogue is not fused
// under ABFT: within the stated tolerance, as unchecked).
TEST_F(OnGpu, AbftCleanStepsRaiseNothing) {
  for (const DlrmConfig& m : {SmallModel(), WideModel()}) {
    const TestStep s = MakeTestStep(m, 300, 40, 7);
    auto gpu = Cuda(m, 512);
    ASSERT_NE(gpu, nullptr);
    ASSERT_EQ(gpu->SetAbft(true, nullptr), "");
    TestOutput g(s), c(s);
    for (int step = 0; step < 3; ++step) ASSERT_EQ(gpu->TrainStep(s.Input(), &g.out), "");
    ASSERT_EQ(Bodies(m, 512)->TrainStep(s.Input(), &c.out), "");
    ExpectSameStep(g, c);
    EXPECT_EQ(gpu->abft_detections(), 0);
  }
}

// A flipped exponent bit in every product of every layer is detected, counted, and the step
// computed again equals the clean checked one bit for bit (cuBLAS and the bodies give the
// same bits again for the same shapes on the same stream).
TEST_F(OnGpu, AbftAFlipInEveryProductIsDetectedAndRecomputed) {
  const DlrmConfig m = WideModel();
  const TestStep s = MakeTestStep(m, 256, 30, 12);
  auto gpu = Cuda(m, 256);
  ASSERT_NE(gpu, nullptr);
  ASSERT_EQ(gpu->SetAbft(true, nullptr), "");
  TestOutput clean(s);
  ASSERT_EQ(gpu->TrainStep(s.Input(), &clean.out), "");
  const int layers = static_cast<int>(m.bottom_mlp.size() + m.top_mlp.size()) + 1;
  int64_t detections = 0;
  for (int site = 0; site < 3 * layers; ++site) {
    if (site == 2 || site == 3 * layers - 1) continue;  // no GEMM (body_abft_test.cc)
    FlipTimes flip(site, 30, 1);
    ASSERT_EQ(gpu->SetAbft(true, &flip), "");
    TestOutput again(s);
    ASSERT_EQ(gpu->TrainStep(s.Input(), &again.out), "") << site;
    EXPECT_TRUE(flip.used()) << site;
    EXPECT_EQ(gpu->abft_detections(), ++detections) << site;
    EXPECT_EQ(again.dense, clean.dense) << site;
    EXPECT_EQ(again.rows, clean.rows) << site;
    EXPECT_EQ(again.probs, clean.probs) << site;
  }
}

TEST_F(OnGpu, AbftAStepThatNeverPassesIsAnError) {
  const TestStep s = MakeTestStep(WideModel(), 64, 20, 3);
  auto gpu = Cuda(s.model, 64);
  ASSERT_NE(gpu, nullptr);
  FlipTimes flip(10, 30, 1 + kAbftRetries);
  ASSERT_EQ(gpu->SetAbft(true, &flip), "");
  TestOutput o(s);
  const std::string e = gpu->TrainStep(s.Input(), &o.out);
  EXPECT_NE(e.find("ABFT: the dense step failed its GEMM checksums"), std::string::npos) << e;
  EXPECT_EQ(gpu->abft_detections(), 1 + kAbftRetries);
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
