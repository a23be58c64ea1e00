// The linear layers' checks with shared checksums (kernels/abft_layer.h), through
// LinearForward and LinearBackward as the model calls them, on every layer shape of both
// benchmark models at batch 2048: the results are the unchecked ones bit for bit, clean layers
// pass with room to spare, and a flip in any of the three products, in its output or in what it
// reads, is caught wherever it moves a checked sum by more than twice that sum's bound.
#include "kernels/abft_layer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "kernels/dense_ops.h"
#include "kernels/abft_test_util.h"
#include "kernels/hash_rng.h"

namespace ecps {
namespace {

constexpr int kBatch = 2048;

// (in, out) of every layer of both models: quickstart 13-128-64-16 / 367-128-64-1, heavy
// 13-512-256-128 / 479-1024-1024-512-256-1.
const std::vector<std::pair<int, int>>& Layers() {
  static const auto* layers = new std::vector<std::pair<int, int>>{
      {13, 128}, {128, 64},    {64, 16},    {367, 128}, {128, 64},  {64, 1},    {13, 512},
      {512, 256}, {256, 128},  {479, 1024}, {1024, 1024}, {1024, 512}, {512, 256}, {256, 1}};
  return *layers;
}

float Uniform(uint64_t seed, uint64_t stream, size_t i) {
  return 2.0f * UnitFloat(Mix64(HashOf(seed, stream, i))) - 1.0f;
}

// One layer's operands (x after a ReLU: half zero; Xavier weights) and its outputs.
struct Layer {
  int in = 0, out = 0;
  std::vector<float> x, w, bias, dy;
  std::vector<float> y, dw, db, dx;

  Layer(int in_, int out_, uint64_t seed, bool with_bias) : in(in_), out(out_) {
    x.resize(static_cast<size_t>(kBatch) * in);
    w.resize(static_cast<size_t>(out) * in);
    bias.assign(out, 0.0f);
    dy.resize(static_cast<size_t>(kBatch) * out);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::max(0.0f, Uniform(seed, 1, i));
    const float bound = std::sqrt(6.0f / static_cast<float>(in + out));
    for (size_t i = 0; i < w.size(); ++i) w[i] = Uniform(seed, 2, i) * bound;
    if (with_bias) {
      for (int o = 0; o < out; ++o) bias[o] = 0.1f * Uniform(seed, 3, o);
    }
    for (size_t i = 0; i < dy.size(); ++i) dy[i] = 1e-3f * Uniform(seed, 4, i);
  }

  // Forward then backward, checked by `abft` when not null.
  void Run(bool relu, const LinearAbft* abft) {
    y.assign(static_cast<size_t>(kBatch) * out, 0.0f);
    dw.assign(w.size(), 0.0f);
    db.assign(out, 0.0f);
    dx.assign(x.size(), 0.0f);
    LinearForward(kBatch, in, out, x.data(), w.data(), bias.data(), relu, y.data(), abft);
    LinearBackward(kBatch, in, out, x.data(), w.data(), dy.data(), dw.data(), db.data(),
                   dx.data(), abft);
  }
};

struct Checks {
  LayerChecksums sums;
  int misses = 0;
  LinearAbft abft;
  explicit Checks(GemmFaultInjector* injector = nullptr) {
    abft.forward = abft.weight_grad = abft.input_grad = AbftScheme::kGlobal;
    abft.injector = injector;
    abft.misses = &misses;
    abft.sums = &sums;
  }
};

TEST(AbftLayerTest, CheckedLayersEqualUncheckedBitForBitAndPassWithRoomToSpare) {
  for (const auto& [in, out] : Layers()) {
    Layer plain(in, out, 5, true), checked(in, out, 5, true);
    plain.Run(true, nullptr);
    Checks c;
    ASSERT_TRUE(UsesLayerChecksums(c.abft));
    checked.Run(true, &c.abft);
    EXPECT_EQ(checked.y, plain.y) << in << "x" << out;
    EXPECT_EQ(checked.dw, plain.dw) << in << "x" << out;
    EXPECT_EQ(checked.db, plain.db) << in << "x" << out;
    EXPECT_EQ(checked.dx, plain.dx) << in << "x" << out;
    EXPECT_EQ(c.misses, 0) << in << "x" << out;
    // lambda = 12 standard deviations of the rounding's sum; a clean sum beyond 9 of them
    // would say the model of the rounding is wrong.
    EXPECT_LT(c.sums.margin, 0.75) << in << "x" << out;
    EXPECT_GT(c.sums.margin, 0.0) << in << "x" << out;  // the sums were compared
  }
}

// A backward whose forward did not leave its sums (other operands) checks GEMM by GEMM, with
// the same results.
TEST(AbftLayerTest, ABackwardWithoutItsForwardsSumsChecksEachGemm) {
  Layer plain(128, 64, 9, true), checked(128, 64, 9, true);
  plain.Run(true, nullptr);
  Checks c;
  checked.Run(true, &c.abft);
  std::vector<float> other_x = checked.x;
  LayerChecksums& s = c.sums;
  s.x = other_x.data();  // as if the forward had run on other activations
  EXPECT_FALSE(CheckedLinearBackward(kBatch, 128, 64, checked.x.data(), checked.w.data(),
                                     checked.dy.data(), checked.dw.data(), checked.db.data(),
                                     checked.dx.data(), nullptr, c.abft));
  LinearBackward(kBatch, 128, 64, checked.x.data(), checked.w.data(), checked.dy.data(),
                 checked.dw.data(), checked.db.data(), checked.dx.data(), &c.abft);
  EXPECT_EQ(checked.dw, plain.dw);
  EXPECT_EQ(checked.dx, plain.dx);
  EXPECT_EQ(c.misses, 0);
}

// Two layers as the model chains them: the first's epilogue sums the second's input, and the
// second's backward masks its dx by the first's ReLU on the way through its check. The same bits
// as unchecked, and a flip in any of the second's products is caught.
TEST(AbftLayerTest, ChainedLayersShareTheInputsSumsAndTheReluMask) {
  const int in = 64, mid = 128, out = 32;
  Layer first(in, mid, 31, true), second(mid, out, 37, true);
  auto run = [&](LinearAbft* a, LinearAbft* b, std::vector<float>* dx_first,
                 std::vector<float>* dx_second) {
    first.y.assign(static_cast<size_t>(kBatch) * mid, 0.0f);
    second.y.assign(static_cast<size_t>(kBatch) * out, 0.0f);
    LinearForward(kBatch, in, mid, first.x.data(), first.w.data(), first.bias.data(), true,
                  first.y.data(), a);
    LinearForward(kBatch, mid, out, first.y.data(), second.w.data(), second.bias.data(), false,
                  second.y.data(), b);
    dx_second->assign(first.y.size(), 0.0f);
    second.dw.assign(second.w.size(), 0.0f), second.db.assign(out, 0.0f);
    if (b != nullptr) {
      LinearBackward(kBatch, mid, out, first.y.data(), second.w.data(), second.dy.data(),
                     second.dw.data(), second.db.data(), dx_second->data(), b, first.y.data());
    } else {
      LinearBackward(kBatch, mid, out, first.y.data(), second.w.data(), second.dy.data(),
                     second.dw.data(), second.db.data(), dx_second->data());
      ReluBackwardInPlace(static_cast<int64_t>(dx_second->size()), first.y.data(),
                          dx_second->data());
    }
    dx_first->assign(first.x.size(), 0.0f);
    first.dw.assign(first.w.size(), 0.0f), first.db.assign(mid, 0.0f);
    LinearBackward(kBatch, in, mid, first.x.data(), first.w.data(), dx_second->data(),
                   first.dw.data(), first.db.data(), dx_first->data(), a);
  };
  std::vector<float> plain_dx1, plain_dx2;
  run(nullptr, nullptr, &plain_dx1, &plain_dx2);
  const std::vector<float> y1 = first.y, y2 = second.y, dw1 = first.dw, dw2 = second.dw;
  // An element the first layer's ReLU passes: where the mask zeroes dx, a flip there changes
  // nothing, and the confirmation clears it.
  int64_t live = 0;
  while (y1[live] <= 0.0f) ++live;
  for (int site : {-1, 3, 4, 5}) {  // -1: no fault; 3, 4, 5: the second layer's products
    OneFlip flip(site, {GemmFault::kOutput, live, 30});
    Checks a(&flip), b(&flip);
    b.abft.site = 3;
    a.abft.output_sums = &b.sums;
    std::vector<float> dx1, dx2;
    run(&a.abft, &b.abft, &dx1, &dx2);
    if (site >= 0) {
      EXPECT_TRUE(flip.used()) << site;
      EXPECT_GT(b.misses, 0) << site;
      continue;
    }
    EXPECT_EQ(b.sums.x_summed, nullptr);  // the second forward took the sums it was left
    EXPECT_EQ(first.y, y1);
    EXPECT_EQ(second.y, y2);
    EXPECT_EQ(first.dw, dw1);
    EXPECT_EQ(second.dw, dw2);
    EXPECT_EQ(dx2, plain_dx2);
    EXPECT_EQ(dx1, plain_dx1);
    EXPECT_EQ(a.misses + b.misses, 0);
    EXPECT_LT(b.sums.margin, 0.75);
  }
}

// A batch whose samples all repeat one constant input, into a layer whose weights are still
// at a constant initialisation, with a constant gradient: the products round alike over the
// batch and miss the probabilistic bound (dw's rows, k = the batch). The confirmation clears
// them: no miss, the outputs the unchecked ones.
TEST(AbftLayerTest, ARepeatedBatchMissesTheBoundAndIsCleared) {
  Layer plain(256, 64, 13, true), checked(256, 64, 13, true);
  for (Layer* l : {&plain, &checked}) {
    std::fill(l->x.begin(), l->x.end(), 0.5f);
    std::fill(l->w.begin(), l->w.end(), 0.03f);
    std::fill(l->dy.begin(), l->dy.end(), 7e-4f);
  }
  plain.Run(true, nullptr);
  Checks c;
  int cleared = 0;
  c.abft.cleared = &cleared;
  checked.Run(true, &c.abft);
  std::printf("margin %.2f, %d columns cleared\n", c.sums.margin, cleared);
  EXPECT_GT(c.sums.margin, 1.0);
  EXPECT_GT(cleared, 0);
  EXPECT_EQ(c.misses, 0);
  EXPECT_EQ(checked.y, plain.y);
  EXPECT_EQ(checked.dw, plain.dw);
  EXPECT_EQ(checked.dx, plain.dx);
}

double Norm2(const float* p, int64_t n, int64_t stride) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(p[i * stride]) * p[i * stride];
  return s;
}

// For product `site` (0 y = x wᵀ, 1 dw = dyᵀ x, 2 dx = dy w) of a layer: the largest
// |change| / bound over the sums its check compares (y's and dx's columns, dw's rows), the
// clean and the faulty outputs given.
double WorstMoveOverBound(const Layer& l, int site, const std::vector<float>& clean,
                          const std::vector<float>& faulty) {
  const int rows = site == 1 ? l.out : kBatch, cols = site == 0 ? l.out : l.in;
  const int sums = site == 1 ? rows : cols;
  const double x2 = Norm2(l.x.data(), static_cast<int64_t>(l.x.size()), 1);
  const double dy2 = Norm2(l.dy.data(), static_cast<int64_t>(l.dy.size()), 1);
  double worst = 0;
  for (int s = 0; s < sums; ++s) {
    double move = 0;
    const int along = site == 1 ? cols : rows;
    for (int t = 0; t < along; ++t) {
      const size_t e = site == 1 ? static_cast<size_t>(s) * cols + t
                                 : static_cast<size_t>(t) * cols + s;
      move += static_cast<double>(faulty[e]) - clean[e];
    }
    double bound = 0;
    if (site == 0) {
      bound = ColumnBound(kBatch, l.in, std::sqrt(x2),
                          std::sqrt(Norm2(l.w.data() + static_cast<size_t>(s) * l.in, l.in, 1)));
    } else if (site == 1) {
      bound = ColumnBound(l.in, kBatch, std::sqrt(x2),
                          std::sqrt(Norm2(l.dy.data() + s, kBatch, l.out)));
    } else {
      bound = ColumnBound(kBatch, l.out, std::sqrt(dy2),
                          std::sqrt(Norm2(l.w.data() + s, l.out, l.in)));
    }
    worst = std::max(worst, std::fabs(move) / bound);
  }
  return worst;
}

const std::vector<float>& Output(const Layer& l, int site) {
  return site == 0 ? l.y : site == 1 ? l.dw : l.dx;
}

TEST(AbftLayerTest, AFlipInAnyProductIsCaughtAboveTwiceItsBound) {
  int output_checked = 0, input_checked = 0, under = 0;
  for (const auto& [in, out] : Layers()) {
    Layer clean(in, out, 21, false);
    clean.Run(false, nullptr);  // no bias and no ReLU: y is the GEMM's output
    for (int site : {0, 1, 2}) {
      const std::vector<float>& c = Output(clean, site);
      double rms = std::sqrt(Norm2(c.data(), static_cast<int64_t>(c.size()), 1) / c.size());
      int64_t e = 0;  // an element at least the RMS
      while (std::fabs(c[e]) < rms) ++e;
      std::vector<GemmFault> faults;
      for (int bit : {20, 27}) faults.push_back({GemmFault::kOutput, e, bit});
      // The inputs' largest elements: x's, w's and dy's as each product reads them.
      const Layer& l = clean;
      auto largest = [](const std::vector<float>& v) {
        int64_t at = 0;
        for (size_t i = 0; i < v.size(); ++i) {
          if (std::fabs(v[i]) > std::fabs(v[at])) at = static_cast<int64_t>(i);
        }
        return at;
      };
      const std::vector<float>& a = site == 0 ? l.x : l.dy;
      const std::vector<float>& b = site == 1 ? l.x : l.w;
      for (int bit : {22, 30}) {
        faults.push_back({GemmFault::kInputA, largest(a), bit});
        faults.push_back({GemmFault::kInputB, largest(b), bit});
      }
      for (const GemmFault& fault : faults) {
        OneFlip flip(site, fault);
        Checks checks(&flip);
        Layer faulty(in, out, 21, false);
        faulty.Run(false, &checks.abft);
        ASSERT_TRUE(flip.used());
        const double worst = WorstMoveOverBound(l, site, c, Output(faulty, site));
        if (worst <= 2.0) {
          ++under;
          continue;
        }
        (fault.where == GemmFault::kOutput ? output_checked : input_checked) += 1;
        EXPECT_GT(checks.misses, 0) << in << "x" << out << " product " << site << " where "
                                    << fault.where << " bit " << fault.bit;
      }
    }
  }
  std::printf("flips above twice the bound: %d of the output, %d of the inputs; %d under\n",
              output_checked, input_checked, under);
  // Every output flip of bit 27 (one per product, 14 layers) moves its sum far past the bound;
  // the bit-20 and input flips that do not are a few.
  EXPECT_GE(output_checked, 14 * 3);
  EXPECT_GT(input_checked, 14 * 3);
}

}  // namespace
}  // namespace ecps
