#include "kernels/optimizers.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace ecps {
namespace {

// Hand-computed expectations use double arithmetic; the float kernels must agree to 1e-6.
constexpr double kTol = 1e-6;

TEST(SparseOptimizer, StateSizes) {
  SparseOptimizerConfig o;
  o.rule = SparseUpdateRule::kSgd;
  EXPECT_EQ(SparseStateFloats(o, 16), 0);
  o.rule = SparseUpdateRule::kAdagrad;
  EXPECT_EQ(SparseStateFloats(o, 16), 16);
  o.rule = SparseUpdateRule::kRowwiseAdagrad;
  EXPECT_EQ(SparseStateFloats(o, 16), 1);
}

TEST(SparseOptimizer, Sgd) {
  SparseOptimizerConfig o;
  o.rule = SparseUpdateRule::kSgd;
  o.lr = 0.5f;
  std::vector<float> p = {1.0f, -2.0f};
  const float g[2] = {0.2f, -0.4f};
  ApplySparseUpdate(o, 2, g, p.data());
  EXPECT_NEAR(p[0], 1.0 - 0.5 * 0.2, kTol);
  EXPECT_NEAR(p[1], -2.0 + 0.5 * 0.4, kTol);
}

TEST(SparseOptimizer, Adagrad) {
  SparseOptimizerConfig o;
  o.rule = SparseUpdateRule::kAdagrad;
  o.lr = 0.1f;
  o.eps = 1e-8f;
  o.initial_accumulator = 0.5f;
  // payload: w0 w1 | a0 a1
  std::vector<float> p = {1.0f, 2.0f, 0.5f, 0.5f};
  const float g[2] = {1.0f, -3.0f};
  ApplySparseUpdate(o, 2, g, p.data());
  // a0 = 0.5 + 1 = 1.5; w0 = 1 - 0.1 * 1 / sqrt(1.5); a1 = 0.5 + 9 = 9.5; w1 = 2 + 0.3/sqrt(9.5)
  EXPECT_NEAR(p[2], 1.5, kTol);
  EXPECT_NEAR(p[3], 9.5, kTol);
  EXPECT_NEAR(p[0], 1.0 - 0.1 / std::sqrt(1.5), kTol);
  EXPECT_NEAR(p[1], 2.0 + 0.3 / std::sqrt(9.5), kTol);
  // Second step accumulates.
  ApplySparseUpdate(o, 2, g, p.data());
  EXPECT_NEAR(p[2], 2.5, kTol);
  EXPECT_NEAR(p[0], 1.0 - 0.1 / std::sqrt(1.5) - 0.1 / std::sqrt(2.5), kTol);
}

TEST(SparseOptimizer, RowwiseAdagrad) {
  SparseOptimizerConfig o;
  o.rule = SparseUpdateRule::kRowwiseAdagrad;
  o.lr = 0.1f;
  std::vector<float> p = {1.0f, 2.0f, 0.0f};
  const float g[2] = {1.0f, -3.0f};
  ApplySparseUpdate(o, 2, g, p.data());
  // a = 0 + (1 + 9) / 2 = 5; w -= 0.1 * g / sqrt(5)
  EXPECT_NEAR(p[2], 5.0, kTol);
  EXPECT_NEAR(p[0], 1.0 - 0.1 / std::sqrt(5.0), kTol);
  EXPECT_NEAR(p[1], 2.0 + 0.3 / std::sqrt(5.0), kTol);
}

TEST(SparseOptimizer, BatchedMatchesSingle) {
  SparseOptimizerConfig o;
  o.rule = SparseUpdateRule::kAdagrad;
  std::vector<float> a = {1, 2, 0, 0}, b = {3, 4, 0, 0}, a2 = a, b2 = b;
  const float g[4] = {0.1f, 0.2f, 0.3f, 0.4f};
  float* ptrs[2] = {a.data(), b.data()};
  ApplySparseUpdates(o, 2, 2, g, ptrs);
  ApplySparseUpdate(o, 2, g, a2.data());
  ApplySparseUpdate(o, 2, g + 2, b2.data());
  EXPECT_EQ(a, a2);
  EXPECT_EQ(b, b2);
}

TEST(SparseOptimizer, InitIsDeterministicAndBounded) {
  SparseOptimizerConfig o;
  o.rule = SparseUpdateRule::kAdagrad;
  o.initial_accumulator = 0.25f;
  const int dim = 16;
  const int64_t rows = 10000;
  std::vector<float> p1(32), p2(32), p3(32);
  InitSparseRow(o, 42, 3, 777, dim, rows, p1.data());
  InitSparseRow(o, 42, 3, 777, dim, rows, p2.data());
  InitSparseRow(o, 42, 3, 778, dim, rows, p3.data());
  EXPECT_EQ(p1, p2);
  EXPECT_NE(p1, p3);
  const double bound = std::sqrt(1.0 / rows);
  for (int k = 0; k < dim; ++k) {
    EXPECT_LE(std::fabs(p1[k]), bound);
    EXPECT_EQ(p1[dim + k], 0.25f);
  }
  // Mean over many rows is ~0 and the spread matches U(-b, b): var = b^2/3.
  double m = 0, v = 0;
  const int n = 20000;
  for (int r = 0; r < n; ++r) {
    InitSparseRow(o, 42, 0, r, dim, rows, p1.data());
    m += p1[0];
    v += p1[0] * p1[0];
  }
  m /= n;
  v /= n;
  EXPECT_NEAR(m, 0.0, 0.05 * bound);
  EXPECT_NEAR(v, bound * bound / 3, 0.05 * bound * bound / 3);
}

TEST(DenseOptimizer, Sizes) {
  DenseOptimizerConfig o;
  o.rule = DenseUpdateRule::kSgd;
  EXPECT_EQ(DenseStateFloats(o, 10), 0);
  o.rule = DenseUpdateRule::kAdagrad;
  EXPECT_EQ(DenseStateFloats(o, 10), 10);
  o.rule = DenseUpdateRule::kAdam;
  EXPECT_EQ(DenseStateFloats(o, 10), 20);
}

TEST(DenseOptimizer, SgdAndAdagrad) {
  DenseOptimizerConfig o;
  o.rule = DenseUpdateRule::kSgd;
  o.lr = 0.25f;
  float w[2] = {1, 1};
  const float g[2] = {2, -4};
  ApplyDenseUpdate(o, 1, 2, g, w, nullptr);
  EXPECT_NEAR(w[0], 0.5, kTol);
  EXPECT_NEAR(w[1], 2.0, kTol);
  o.rule = DenseUpdateRule::kAdagrad;
  float s[2] = {0, 0};
  ApplyDenseUpdate(o, 1, 2, g, w, s);
  EXPECT_NEAR(s[0], 4.0, kTol);
  EXPECT_NEAR(s[1], 16.0, kTol);
  EXPECT_NEAR(w[0], 0.5 - 0.25 * 2 / 2.0, kTol);
  EXPECT_NEAR(w[1], 2.0 + 0.25 * 4 / 4.0, kTol);
}

TEST(DenseOptimizer, AdamTwoSteps) {
  DenseOptimizerConfig o;
  o.rule = DenseUpdateRule::kAdam;
  o.lr = 0.01f;
  o.beta1 = 0.9f;
  o.beta2 = 0.999f;
  o.eps = 1e-8f;
  float w[1] = {1.0f};
  float s[2] = {0, 0};
  const float g1[1] = {0.5f};
  ApplyDenseUpdate(o, 1, 1, g1, w, s);
  // m = 0.05, v = 0.00025; mhat = 0.5, vhat = 0.25 -> w = 1 - 0.01 * 0.5 / (0.5 + eps)
  double m = 0.1 * 0.5, v = 0.001 * 0.25;
  EXPECT_NEAR(s[0], m, kTol);
  EXPECT_NEAR(s[1], v, kTol);
  double wexp = 1.0 - 0.01 * (m / 0.1) / (std::sqrt(v / 0.001) + 1e-8);
  EXPECT_NEAR(w[0], wexp, kTol);
  const float g2[1] = {-1.0f};
  ApplyDenseUpdate(o, 2, 1, g2, w, s);
  m = 0.9 * m + 0.1 * -1.0;
  v = 0.999 * v + 0.001 * 1.0;
  const double mhat = m / (1 - 0.81), vhat = v / (1 - 0.999 * 0.999);
  wexp -= 0.01 * mhat / (std::sqrt(vhat) + 1e-8);
  EXPECT_NEAR(s[0], m, kTol);
  EXPECT_NEAR(s[1], v, kTol);
  EXPECT_NEAR(w[0], wexp, kTol);
}

TEST(Optimizers, Validation) {
  SparseOptimizerConfig s;
  EXPECT_TRUE(ValidateSparseOptimizer(s).ok());
  s.eps = 0;
  EXPECT_EQ(ValidateSparseOptimizer(s).code(), absl::StatusCode::kInvalidArgument);
  DenseOptimizerConfig d;
  EXPECT_TRUE(ValidateDenseOptimizer(d).ok());
  d.beta1 = 1;
  EXPECT_EQ(ValidateDenseOptimizer(d).code(), absl::StatusCode::kInvalidArgument);
  d.beta1 = 0.9f;
  d.rule = DenseUpdateRule::kSgd;
  d.lr = 0;
  EXPECT_FALSE(ValidateDenseOptimizer(d).ok());
}

}  // namespace
}  // namespace ecps
