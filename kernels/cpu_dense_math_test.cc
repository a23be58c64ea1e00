// The CPU DenseMath under ABFT (worker.abft): a step whose GEMM checks miss is recomputed, and
// what it returns equals the fault-free step bit for bit; a machine that keeps failing them
// gets an error, never gradients.
#include "kernels/cpu_dense_math.h"

#include <cstdio>
#include <string>

#include "gtest/gtest.h"
#include "kernels/abft.h"
#include "kernels/cuda/test_batch.h"
#include "kernels/dlrm.h"

namespace ecps {
namespace {

using gpu::testing::MakeTestStep;
using gpu::testing::TestOutput;
using gpu::testing::TestStep;

// Flips `bit` of output element `element` of GEMM `site`, the first `times` times it runs.
class FlipTimes : public GemmFaultInjector {
 public:
  FlipTimes(int site, int times) : site_(site), left_(times) {}
  bool Inject(int site, const GemmCall&, GemmFault* fault) override {
    if (site != site_ || left_ == 0) return false;
    --left_;
    *fault = {GemmFault::kOutput, 3, 30};
    return true;
  }

 private:
  int site_, left_;
};

TEST(CpuDenseMathAbft, ADetectedStepIsRecomputedToTheFaultFreeResult) {
  const DlrmConfig m = gpu::testing::SmallModel();
  const TestStep s = MakeTestStep(m, 256, 40, 5);
  const MachineBalance balance = MeasureMachineBalance();
  auto model = Dlrm::Create(m, 256);
  ASSERT_TRUE(model.ok()) << model.status();
  CpuDenseMath cpu(model->get());
  (*model)->SetAbft(AbftMode::kAuto, balance);
  TestOutput clean(s);
  ASSERT_EQ(cpu.TrainStep(s.Input(), &clean.out), "");
  EXPECT_EQ(cpu.abft_detections(), 0);
  // Every layer's forward and weight-gradient GEMM (sites 3l, 3l+1), once each.
  const int layers = static_cast<int>(m.bottom_mlp.size() + m.top_mlp.size()) + 1;
  // Each flip is either detected (the step computed again) or, where what follows the GEMM
  // erases it (a ReLU zeroing a negative output, a mask zeroing a gradient), raised and cleared
  // by the confirmation; never passed unseen, and the result is the clean one either way.
  int detected = 0;
  for (int site = 0; site < 3 * layers; ++site) {
    if (site == 2) continue;  // the dense features' gradient is never computed
    FlipTimes flip(site, 1);
    (*model)->SetAbft(AbftMode::kAuto, balance, &flip);
    TestOutput again(s);
    const int64_t before = cpu.abft_detections();
    ASSERT_EQ(cpu.TrainStep(s.Input(), &again.out), "") << site;
    if (cpu.abft_detections() == before + 1) {
      ++detected;
    } else {
      EXPECT_EQ(cpu.abft_detections(), before) << site;
      EXPECT_GT((*model)->abft_cleared(), 0) << site;
    }
    EXPECT_EQ(again.dense, clean.dense) << site;
    EXPECT_EQ(again.rows, clean.rows) << site;
    EXPECT_EQ(again.out.loss, clean.out.loss) << site;
  }
  std::printf("%d of %d flips detected, the rest erased and cleared\n", detected,
              3 * layers - 1);
  EXPECT_GT(detected, layers);
}

TEST(CpuDenseMathAbft, AStepThatNeverPassesIsAnError) {
  const DlrmConfig m = gpu::testing::SmallModel();
  const TestStep s = MakeTestStep(m, 128, 40, 6);
  auto model = Dlrm::Create(m, 128);
  ASSERT_TRUE(model.ok()) << model.status();
  CpuDenseMath cpu(model->get());
  // On every run: each attempt's confirmation (ConfirmMiss) computes the same wrong bits, and
  // finds them outside the rounding.
  FlipTimes flip(0, 1 << 30);
  (*model)->SetAbft(AbftMode::kDetect, MachineBalance{}, &flip);
  TestOutput out(s);
  const std::string e = cpu.TrainStep(s.Input(), &out.out);
  EXPECT_NE(e.find("ABFT"), std::string::npos) << e;
  EXPECT_EQ(cpu.abft_detections(), 1 + kAbftRetries);
}

}  // namespace
}  // namespace ecps
