// ABFT on the CUDA path, run on the CPU (docs/abft.md): the check bodies of train_kernels.h
// on single GEMMs (clean ones pass with room, flips above twice the bound miss), and the CPU
// run of the CUDA step (body_dense_math.h) with its checks on: clean steps raise nothing and
// equal unchecked ones bit for bit; a bit flipped in any product of any layer is detected,
// counted, and the recomputed step equals the clean one. Runs on every machine; the GPU's
// launches of the same bodies are tested in cuda_dense_math_test.cc (on a GPU only).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/abft.h"
#include "kernels/abft_bound.h"
#include "kernels/cuda/step_plan.h"
#include "kernels/cuda/test_batch.h"
#include "kernels/cuda/train_kernels.h"

namespace ecps::gpu {
namespace {

using testing::Bodies;
using testing::MakeTestStep;
using testing::TestOutput;
using testing::TestStep;
using testing::WideModel;

// C[r][j] as the bodies' trainer computes it: float products summed over i in order.
float ProductAt(const GemmOperands& g, int r, int j) {
  float s = 0.0f;
  for (int i = 0; i < g.k; ++i) s += OpA(g, r, i) * OpB(g, i, j);
  return s;
}

// Column j's bound, from the operands (independently of the bodies' sums).
double BoundOf(const GemmOperands& g, int j) {
  double a2 = 0.0, b2 = 0.0;
  for (int r = 0; r < g.m; ++r) {
    for (int i = 0; i < g.k; ++i) a2 += static_cast<double>(OpA(g, r, i)) * OpA(g, r, i);
  }
  for (int i = 0; i < g.k; ++i) b2 += static_cast<double>(OpB(g, i, j)) * OpB(g, i, j);
  return AbftColumnBound(kAbftLambda, g.m, g.k, std::sqrt(a2), std::sqrt(b2));
}

// How far a flip moves v; infinite when it makes v a NaN or an infinity (bit 30 of a value in
// [1, 2)), which the check counts as a miss whatever the bound.
double ChangeOfFlip(float v, int bit) {
  float flipped = v;
  FlipBitAt(0, &flipped, 0, bit);
  if (!std::isfinite(flipped)) return INFINITY;
  return std::fabs(static_cast<double>(flipped) - v);
}

// The three products of every layer of the wide test model at a batch of 96, with operands
// of activations' and weights' typical sizes.
struct Product {
  std::vector<float> a, b, c;
  GemmOperands g;
};
std::vector<Product> LayerProducts() {
  ModelPlan plan;
  EXPECT_EQ(MakeModelPlan(WideModel(), &plan), "");
  constexpr int kBatch = 96;
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<Product> out;
  auto add = [&](int a_floats, int b_floats, int c_floats, auto make) {
    Product p;
    p.a.resize(a_floats);
    p.b.resize(b_floats);
    p.c.resize(c_floats);
    for (float& v : p.a) v = u(rng);
    for (float& v : p.b) v = 0.4f * u(rng);
    p.g = make(p);
    out.push_back(std::move(p));
  };
  for (const auto* layers : {&plan.bottom, &plan.top}) {
    for (const LayerShape& l : *layers) {
      const int in = l.in, o = l.out;
      add(kBatch * in, o * in, kBatch * o, [&](Product& p) {
        return ForwardGemm(kBatch, in, o, p.a.data(), p.b.data(), p.c.data());
      });
      add(kBatch * o, kBatch * in, o * in, [&](Product& p) {
        return WeightGradGemm(kBatch, in, o, p.a.data(), p.b.data(), p.c.data());
      });
      add(kBatch * o, o * in, kBatch * in, [&](Product& p) {
        return InputGradGemm(kBatch, in, o, p.a.data(), p.b.data(), p.c.data());
      });
    }
  }
  for (Product& p : out) {
    for (int r = 0; r < p.g.m; ++r) {
      for (int j = 0; j < p.g.n; ++j)
        p.c[static_cast<size_t>(r) * p.g.ldc + j] = ProductAt(p.g, r, j);
    }
  }
  return out;
}

TEST(AbftBodies, CleanGemmsPassWithRoomToSpare) {
  double worst = 0.0;
  for (const Product& p : LayerProducts()) {
    const BodyCheck check = CheckGemmOnCpu(p.g);
    EXPECT_EQ(check.misses + check.cleared, 0)
        << "m=" << p.g.m << " n=" << p.g.n << " k=" << p.g.k;
    worst = std::max(worst, check.margin);
  }
  // As the CPU's check (AbftTest.CleanGemmsPassWithRoomToSpare): a clean GEMM stays well
  // inside the bound, and is not trivially far from it either (the bound is not loose by
  // orders of magnitude).
  std::printf("largest clean |checksum difference| / bound: %.3g\n", worst);
  EXPECT_LT(worst, 0.75);
  EXPECT_GT(worst, 1e-4);
}

// Bits 20 to 23 of an element of typical size (at least the output's RMS) move its column's
// checksum by more than twice the bound on these shapes, and bit 30 by far more: each is a miss.
TEST(AbftBodies, FlipsAboveTwiceTheBoundMiss) {
  for (Product& p : LayerProducts()) {
    const GemmOperands& g = p.g;
    double rms = 0.0;
    for (float v : p.c) rms += static_cast<double>(v) * v;
    rms = std::sqrt(rms / p.c.size());
    int tried = 0;
    for (size_t e = 0; e < p.c.size() && tried < 3; ++e) {
      if (std::fabs(p.c[e]) < rms) continue;
      ++tried;
      const double bound = BoundOf(g, static_cast<int>(e % g.ldc));
      for (int bit : {20, 21, 22, 23, 30}) {
        ASSERT_GT(ChangeOfFlip(p.c[e], bit), 2 * bound) << "bit " << bit;
        const float keep = p.c[e];
        FlipBitAt(0, p.c.data(), static_cast<int64_t>(e), bit);
        EXPECT_EQ(CheckGemmOnCpu(g).misses, 1)
            << "m=" << g.m << " n=" << g.n << " k=" << g.k << " element " << e << " bit " << bit;
        p.c[e] = keep;
      }
    }
    EXPECT_GT(tried, 0);
  }
}

// Flips `bit` of an element of typical size of GEMM `site`'s output, the first `times` times
// it runs. The bodies' trainer hands the injector host pointers, so it can compute the
// product first and state its premise: the flip moves the checksum by more than twice the
// bound.
class TypicalFlip : public GemmFaultInjector {
 public:
  TypicalFlip(int site, int bit, int times = 1) : site_(site), bit_(bit), left_(times) {}
  bool Inject(int site, const GemmCall& call, GemmFault* fault) override {
    asked_.insert(site);
    if (site != site_ || left_ == 0) return false;
    --left_;
    GemmOperands g{call.ta,  call.tb, call.m,   call.n, call.k,  call.a,
                   call.lda, call.b,  call.ldb, call.c, call.ldc};
    std::vector<float> c(static_cast<size_t>(g.m) * g.n);
    double rms = 0.0;
    for (int r = 0; r < g.m; ++r) {
      for (int j = 0; j < g.n; ++j) {
        const float v = ProductAt(g, r, j);
        c[static_cast<size_t>(r) * g.n + j] = v;
        rms += static_cast<double>(v) * v;
      }
    }
    rms = std::sqrt(rms / c.size());
    size_t e = c.size() / 3;
    while (std::fabs(c[e]) < rms) e = (e + 1) % c.size();
    const int r = static_cast<int>(e / g.n), j = static_cast<int>(e % g.n);
    premise_ = ChangeOfFlip(c[e], bit_) > 2 * BoundOf(g, j);
    *fault = {GemmFault::kOutput, static_cast<int64_t>(r) * g.ldc + j, bit_};
    return true;
  }
  bool used() const { return left_ == 0; }
  bool premise() const { return premise_; }
  const std::set<int>& asked() const { return asked_; }

 private:
  int site_, bit_, left_;
  bool premise_ = false;
  std::set<int> asked_;
};

// Structured data breaks the bound's premise (independent rounding errors): equal terms summed
// in order round the same way, and equal rows make every row of a column err alike, so a clean
// GEMM's column sums miss the bound. The elements of the missed columns are each within their
// deterministic rounding bound, so the misses are cleared; a flipped element is not.
TEST(AbftBodies, RepeatedValuesMissTheBoundAndTheElementsClearThem) {
  constexpr int kBatch = 1024, kIn = 1024, kOut = 6;
  std::vector<float> x(static_cast<size_t>(kBatch) * kIn, 1.0f), w(kOut * kIn);
  std::vector<float> y(static_cast<size_t>(kBatch) * kOut);
  for (int o = 0; o < kOut; ++o) {
    std::fill(w.begin() + int64_t{o} * kIn, w.begin() + int64_t{o + 1} * kIn, 0.1f * (1 + o));
  }
  const GemmOperands g = ForwardGemm(kBatch, kIn, kOut, x.data(), w.data(), y.data());
  for (int r = 0; r < g.m; ++r) {
    for (int j = 0; j < g.n; ++j) y[static_cast<size_t>(r) * g.ldc + j] = ProductAt(g, r, j);
  }
  const BodyCheck clean = CheckGemmOnCpu(g);
  std::printf("repeated values: margin %.2f, %d of %d columns cleared\n", clean.margin,
              clean.cleared, g.n);
  EXPECT_GT(clean.margin, 1.0);  // the column bound missed
  EXPECT_GT(clean.cleared, 0);
  EXPECT_EQ(clean.misses, 0);
  for (int bit : {20, 27}) {
    const float keep = y[5 * g.ldc + 3];
    FlipBitAt(0, y.data(), 5 * g.ldc + 3, bit);
    const BodyCheck flipped = CheckGemmOnCpu(g);
    EXPECT_EQ(flipped.misses, 1) << "bit " << bit;
    EXPECT_GE(flipped.cleared, clean.cleared - 1) << "bit " << bit;  // the others still clear
    y[5 * g.ldc + 3] = keep;
  }
}

void ExpectBitIdentical(const TestOutput& got, const TestOutput& want, const std::string& what) {
  EXPECT_EQ(got.dense, want.dense) << what;
  EXPECT_EQ(got.rows, want.rows) << what;
  EXPECT_EQ(got.probs, want.probs) << what;
  EXPECT_EQ(got.out.loss, want.out.loss) << what;
}

TEST(BodyDenseMathAbft, CleanStepsRaiseNothingAndEqualTheUncheckedStep) {
  const TestStep s = MakeTestStep(WideModel(), 120, 30, 21);
  for (int slices : {1, 3}) {
    auto plain = Bodies(s.model, s.batch, slices);
    auto checked = Bodies(s.model, s.batch, slices);
    ASSERT_EQ(checked->SetAbft(true, nullptr), "");
    TestOutput want(s), got(s);
    ASSERT_EQ(plain->TrainStep(s.Input(), &want.out), "");
    for (int step = 0; step < 3; ++step) {
      ASSERT_EQ(checked->TrainStep(s.Input(), &got.out), "");
      ExpectBitIdentical(got, want, "slices " + std::to_string(slices));
    }
    EXPECT_EQ(checked->abft_detections(), 0);
  }
}

// Every GEMM of the step is asked about, with the CPU model's site numbers; the output
// layer's input gradient is no GEMM here (the loss is fused into it), nor is the dense
// features' gradient anywhere.
TEST(BodyDenseMathAbft, EveryLayerProductIsASite) {
  const DlrmConfig m = WideModel();
  const TestStep s = MakeTestStep(m, 40, 10, 3);
  auto math = Bodies(m, s.batch);
  TypicalFlip none(-1, 30);
  ASSERT_EQ(math->SetAbft(true, &none), "");
  TestOutput o(s);
  ASSERT_EQ(math->TrainStep(s.Input(), &o.out), "");
  const int layers = static_cast<int>(m.bottom_mlp.size() + m.top_mlp.size()) + 1;
  std::set<int> want;
  for (int site = 0; site < 3 * layers; ++site) {
    if (site != 2 && site != 3 * layers - 1) want.insert(site);
  }
  EXPECT_EQ(none.asked(), want);
}

TEST(BodyDenseMathAbft, AFlipInEveryProductIsDetectedAndRecomputed) {
  const DlrmConfig m = WideModel();
  const TestStep s = MakeTestStep(m, 64, 20, 8);
  TestOutput clean(s);
  ASSERT_EQ(Bodies(m, s.batch)->TrainStep(s.Input(), &clean.out), "");
  auto math = Bodies(m, s.batch);
  const int layers = static_cast<int>(m.bottom_mlp.size() + m.top_mlp.size()) + 1;
  int64_t detections = 0;
  for (int site = 0; site < 3 * layers; ++site) {
    if (site == 2 || site == 3 * layers - 1) continue;  // no GEMM (above)
    for (int bit : {20, 21, 22, 23, 30}) {
      const std::string what = "site " + std::to_string(site) + " bit " + std::to_string(bit);
      TypicalFlip flip(site, bit);
      ASSERT_EQ(math->SetAbft(true, &flip), "");
      TestOutput again(s);
      ASSERT_EQ(math->TrainStep(s.Input(), &again.out), "") << what;
      ASSERT_TRUE(flip.used()) << what;
      EXPECT_TRUE(flip.premise()) << what << ": the flip is not above twice the bound";
      EXPECT_EQ(math->abft_detections(), ++detections) << what;
      ExpectBitIdentical(again, clean, what);
    }
  }
}

TEST(BodyDenseMathAbft, AStepThatNeverPassesIsAnError) {
  const TestStep s = MakeTestStep(WideModel(), 32, 10, 6);
  for (int slices : {1, 2}) {
    auto math = Bodies(s.model, s.batch, slices);
    TypicalFlip flip(10, 30, 1000);  // every time, in every slice
    ASSERT_EQ(math->SetAbft(true, &flip), "");
    TestOutput o(s);
    const std::string e = math->TrainStep(s.Input(), &o.out);
    EXPECT_NE(e.find("ABFT: the dense step failed its GEMM checksums 3 times in a row"),
              std::string::npos)
        << e;
    EXPECT_EQ(math->abft_detections(), 1 + kAbftRetries);
  }
}

// The bodies' trainers flip outputs only; asking for more is a clear error, not a silent pass.
TEST(BodyDenseMathAbft, AnInputFaultIsAnError) {
  class InputFault : public GemmFaultInjector {
   public:
    bool Inject(int, const GemmCall&, GemmFault* fault) override {
      *fault = {GemmFault::kInputA, 0, 30};
      return true;
    }
  } input;
  const TestStep s = MakeTestStep(WideModel(), 16, 8, 2);
  auto math = Bodies(s.model, s.batch);
  ASSERT_EQ(math->SetAbft(true, &input), "");
  TestOutput o(s);
  const std::string e = math->TrainStep(s.Input(), &o.out);
  EXPECT_NE(e.find("flips GEMM outputs only (site 0)"), std::string::npos) << e;
}

}  // namespace
}  // namespace ecps::gpu
