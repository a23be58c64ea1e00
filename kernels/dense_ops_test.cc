// Gradient checks of each layer's backward against central finite differences.
//
// Each check uses a scalar loss L = sum_i r_i * out_i with fixed random r, evaluated in
// double from the float forward. Step h = 1e-2 (the ops are linear or quadratic in each
// input, so central differences are exact up to float rounding); an analytic gradient g
// passes when |g - fd| <= 2e-3 + 1e-2 * |fd|. A wrong backward (e.g. a transposed product
// or a missing term) misses by O(1) and fails.
#include "kernels/dense_ops.h"

#include <cstdlib>
#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace ecps {
namespace {

constexpr float kH = 1e-2f;
constexpr double kAbsTol = 2e-3, kRelTol = 1e-2;

std::vector<float> Random(size_t n, std::mt19937* rng, float lo = -1, float hi = 1) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = u(*rng);
  return v;
}

double Weighted(const std::vector<float>& out, const std::vector<float>& r) {
  double s = 0;
  for (size_t i = 0; i < out.size(); ++i) s += static_cast<double>(out[i]) * r[i];
  return s;
}

// Checks analytic gradient `grad` of loss() w.r.t. every element of *param.
void CheckGrad(const char* what, std::vector<float>* param, const std::vector<float>& grad,
               const std::function<double()>& loss, float h = kH) {
  ASSERT_EQ(param->size(), grad.size());
  for (size_t i = 0; i < param->size(); ++i) {
    const float orig = (*param)[i];
    (*param)[i] = orig + h;
    const double lp = loss();
    (*param)[i] = orig - h;
    const double lm = loss();
    (*param)[i] = orig;
    const double fd = (lp - lm) / (2.0 * h);
    EXPECT_NEAR(grad[i], fd, kAbsTol + kRelTol * std::fabs(fd)) << what << "[" << i << "]";
  }
}

TEST(DenseOps, LinearBackwardMatchesFiniteDifferences) {
  std::mt19937 rng(1);
  const int B = 5, I = 7, O = 4;
  auto x = Random(B * I, &rng), w = Random(O * I, &rng), bias = Random(O, &rng);
  auto r = Random(B * O, &rng);
  std::vector<float> y(B * O);
  auto loss = [&] {
    LinearForward(B, I, O, x.data(), w.data(), bias.data(), false, y.data());
    return Weighted(y, r);
  };
  std::vector<float> dw(O * I), db(O), dx(B * I);
  LinearBackward(B, I, O, x.data(), w.data(), r.data(), dw.data(), db.data(), dx.data());
  CheckGrad("w", &w, dw, loss);
  CheckGrad("bias", &bias, db, loss);
  CheckGrad("x", &x, dx, loss);
}

// Both GEMM libraries give the same layers (up to their summation orders), and switching is
// refused, changing nothing, in a build without oneDNN.
TEST(DenseOps, BothGemmLibrariesGiveTheSameLayers) {
  const GemmLibrary was = CurrentGemmLibrary();
  if (!SetGemmLibrary(GemmLibrary::kOneDnn)) {
    EXPECT_EQ(CurrentGemmLibrary(), was);
    GTEST_SKIP() << "this build has no oneDNN";
  }
  std::mt19937 rng(4);
  const int B = 37, I = 53, O = 29;  // odd sizes: every edge of the kernels' blocking
  auto x = Random(B * I, &rng), w = Random(O * I, &rng), bias = Random(O, &rng);
  auto dy = Random(B * O, &rng);
  std::vector<std::vector<float>> y(2, std::vector<float>(B * O)), dw(2, std::vector<float>(O * I)),
      db(2, std::vector<float>(O)), dx(2, std::vector<float>(B * I));
  const GemmLibrary libs[2] = {GemmLibrary::kOpenBlas, GemmLibrary::kOneDnn};
  for (int l = 0; l < 2; ++l) {
    ASSERT_TRUE(SetGemmLibrary(libs[l]));
    EXPECT_EQ(CurrentGemmLibrary(), libs[l]);
    LinearForward(B, I, O, x.data(), w.data(), bias.data(), true, y[l].data());
    LinearBackward(B, I, O, x.data(), w.data(), dy.data(), dw[l].data(), db[l].data(),
                   dx[l].data());
  }
  SetGemmLibrary(was);
  auto expect_near = [](const std::vector<float>& a, const std::vector<float>& b, const char* what) {
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-4f) << what << "[" << i << "]";
  };
  expect_near(y[0], y[1], "y");
  expect_near(dw[0], dw[1], "dw");
  expect_near(db[0], db[1], "db");
  expect_near(dx[0], dx[1], "dx");
  EXPECT_NE(y[1], std::vector<float>(B * O, 0.0f));
}

TEST(DenseOps, LinearForwardValues) {
  // y = x w^T + b for a 1x2 * (2x2)^T case worked by hand.
  const float x[2] = {1, 2}, w[4] = {3, 4, -5, 6}, b[2] = {0.5f, -1};
  float y[2];
  LinearForward(1, 2, 2, x, w, b, false, y);
  EXPECT_FLOAT_EQ(y[0], 1 * 3 + 2 * 4 + 0.5f);
  EXPECT_FLOAT_EQ(y[1], 1 * -5 + 2 * 6 - 1);
  const float w2[4] = {-3, -4, 1, 1};
  LinearForward(1, 2, 2, x, w2, b, true, y);
  EXPECT_FLOAT_EQ(y[0], 0.0f);
  EXPECT_FLOAT_EQ(y[1], 2.0f);
}

TEST(DenseOps, ReluBackwardMatchesFiniteDifferences) {
  std::mt19937 rng(2);
  const int B = 6, I = 5, O = 8;
  auto x = Random(B * I, &rng), w = Random(O * I, &rng), bias = Random(O, &rng);
  auto r = Random(B * O, &rng);
  std::vector<float> y(B * O);
  LinearForward(B, I, O, x.data(), w.data(), bias.data(), false, y.data());
  // Keep pre-activations away from the kink so +-h never crosses it.
  for (int b = 0; b < B; ++b)
    for (int o = 0; o < O; ++o)
      if (std::fabs(y[b * O + o]) < 0.2f) bias[o] += 0.5f;
  auto loss = [&] {
    LinearForward(B, I, O, x.data(), w.data(), bias.data(), true, y.data());
    return Weighted(y, r);
  };
  loss();
  int active = 0;
  for (float v : y) active += v > 0;
  ASSERT_GT(active, 5);
  ASSERT_LT(active, B * O);
  std::vector<float> dy = r;
  ReluBackwardInPlace(B * O, y.data(), dy.data());
  std::vector<float> dw(O * I), db(O), dx(B * I);
  LinearBackward(B, I, O, x.data(), w.data(), dy.data(), dw.data(), db.data(), dx.data());
  CheckGrad("x", &x, dx, loss, 1e-3f);
  CheckGrad("w", &w, dw, loss, 1e-3f);
}

TEST(DenseOps, InteractionMatchesFiniteDifferences) {
  std::mt19937 rng(3);
  for (const auto& shape : {std::pair{6, 16}, std::pair{6, 5}, std::pair{19, 3}}) {
    const int F = shape.first, dim = shape.second;  // (lambdas cannot capture bindings in C++17)
    const int B = 3, P = InteractionPairs(F), stride = P + 2;
    std::vector<float> scratch(InteractionScratchFloats(F, dim));
    auto first = Random(B * dim, &rng), rest = Random(B * (F - 1) * dim, &rng);
    auto r = Random(B * stride, &rng);
    for (int b = 0; b < B; ++b) r[b * stride + P] = r[b * stride + P + 1] = 0;  // padding
    std::vector<float> out(B * stride, 0.0f);
    auto loss = [&] {
      InteractionForward(B, F, dim, first.data(), rest.data(), out.data(), stride,
                         scratch.data());
      return Weighted(out, r);
    };
    std::vector<float> d_first(first.size()), d_rest(rest.size());
    InteractionBackward(B, F, dim, first.data(), rest.data(), r.data(), stride, d_first.data(),
                        d_rest.data(), scratch.data());
    CheckGrad("first", &first, d_first, loss);
    CheckGrad("rest", &rest, d_rest, loss);
  }
}

// The sums' order is part of the contract (the GPU bodies repeat it): forward adds a dot's
// products in k order, backward adds g(v, j) * z_j over ascending j != v. Scratch starts as
// NaN, so a padding lane or a stale entry that leaked into a result would show.
TEST(DenseOps, InteractionAddsInItsStatedOrder) {
  std::mt19937 rng(11);
  for (int F : {2, 3, 16, 17, 27}) {
    for (int dim : {1, 5, 16, 37}) {
      const int B = 2, P = InteractionPairs(F), stride = P + 1;
      const auto first = Random(B * dim, &rng), rest = Random(B * (F - 1) * dim, &rng);
      const auto g = Random(B * stride, &rng);
      std::vector<float> scratch(InteractionScratchFloats(F, dim), std::nanf(""));
      std::vector<float> out(B * stride, -7.0f);
      std::vector<float> d_first(first.size(), std::nanf("")), d_rest(rest.size(), std::nanf(""));
      InteractionForward(B, F, dim, first.data(), rest.data(), out.data(), stride,
                         scratch.data());
      std::fill(scratch.begin(), scratch.end(), std::nanf(""));
      InteractionBackward(B, F, dim, first.data(), rest.data(), g.data(), stride,
                          d_first.data(), d_rest.data(), scratch.data());
      for (int b = 0; b < B; ++b) {
        auto z = [&](int v) {
          return v == 0 ? first.data() + b * dim : rest.data() + (b * (F - 1) + v - 1) * dim;
        };
        auto pair = [&](int i, int j) { return i * (i - 1) / 2 + j; };  // j < i
        for (int i = 1; i < F; ++i) {
          for (int j = 0; j < i; ++j) {
            float s = 0.0f;
            for (int k = 0; k < dim; ++k) s += z(i)[k] * z(j)[k];
            ASSERT_EQ(out[b * stride + pair(i, j)], s) << F << " " << dim << " " << i << " " << j;
          }
        }
        EXPECT_EQ(out[b * stride + P], -7.0f);  // past the pairs: untouched
        for (int v = 0; v < F; ++v) {
          const float* got =
              v == 0 ? d_first.data() + b * dim : d_rest.data() + (b * (F - 1) + v - 1) * dim;
          for (int k = 0; k < dim; ++k) {
            float s = 0.0f;
            for (int j = 0; j < F; ++j) {
              if (j == v) continue;
              s += g[b * stride + (j < v ? pair(v, j) : pair(j, v))] * z(j)[k];
            }
            ASSERT_EQ(got[k], s) << F << " " << dim << " " << v << " " << k;
          }
        }
      }
    }
  }
}

TEST(DenseOps, InteractionOrder) {
  // vectors z0=(1,0), z1=(2,3), z2=(4,5): pairs (1,0),(2,0),(2,1) = 2, 4, 23.
  const float first[2] = {1, 0}, rest[4] = {2, 3, 4, 5};
  float out[3];
  std::vector<float> scratch(InteractionScratchFloats(3, 2));
  InteractionForward(1, 3, 2, first, rest, out, 3, scratch.data());
  EXPECT_FLOAT_EQ(out[0], 2);
  EXPECT_FLOAT_EQ(out[1], 4);
  EXPECT_FLOAT_EQ(out[2], 23);
}

TEST(DenseOps, BceMatchesFiniteDifferencesAndValues) {
  std::vector<float> logits = {-3.0f, -0.5f, 0.0f, 0.7f, 4.0f, 30.0f};
  const std::vector<float> labels = {0, 1, 1, 0, 1, 0};
  const int B = static_cast<int>(logits.size());
  std::vector<float> d(B), p(B);
  const float mean = BceWithLogits(B, logits.data(), labels.data(), d.data(), p.data());
  double expect = 0;
  for (int b = 0; b < B; ++b) {
    const double s = 1.0 / (1.0 + std::exp(-static_cast<double>(logits[b])));
    EXPECT_NEAR(p[b], s, 1e-6);
    // -[y log s + (1-y) log(1-s)], with log(1-s) = -z - log(1+e^-z) for large z.
    expect += labels[b] ? -std::log(s) : logits[b] + std::log1p(std::exp(-logits[b]));
  }
  EXPECT_NEAR(mean, expect / B, 1e-5);
  auto loss = [&] {
    return static_cast<double>(BceWithLogits(B, logits.data(), labels.data(), nullptr, nullptr));
  };
  CheckGrad("logits", &logits, d, loss, 1e-2f);
}

TEST(DenseOps, SetBlasThreads) { EXPECT_EQ(SetBlasThreads(1), 1); }

// A core narrower than the CPU (or one OpenBLAS falls back to, unknown here) gets the core for
// the CPU's widest vectors; one as wide or wider gets nothing.
TEST(DenseOps, OpenBlasCoreForTheCpu) {
  EXPECT_EQ(OpenBlasCoreFor("Prescott", 3), "SkylakeX");
  EXPECT_EQ(OpenBlasCoreFor("Haswell", 3), "SkylakeX");
  EXPECT_EQ(OpenBlasCoreFor("Prescott", 2), "Haswell");
  EXPECT_EQ(OpenBlasCoreFor("Sandybridge", 2), "Haswell");
  EXPECT_EQ(OpenBlasCoreFor("Core2", 1), "Sandybridge");
  EXPECT_EQ(OpenBlasCoreFor("SkylakeX", 3), "");
  EXPECT_EQ(OpenBlasCoreFor("Cooperlake", 3), "");
  EXPECT_EQ(OpenBlasCoreFor("Zen", 2), "");
  EXPECT_EQ(OpenBlasCoreFor("SkylakeX", 2), "");
  EXPECT_EQ(OpenBlasCoreFor("Prescott", 0), "");
  const int level = CpuVectorLevel();
  EXPECT_GE(level, 0);
  EXPECT_LE(level, 3);
}

// The advice names a core for the CPU's widest vectors, or nothing; never anything once the
// user chose a core.
TEST(DenseOps, OpenBlasCoreAdvice) {
  const char* before = std::getenv("OPENBLAS_CORETYPE");
  std::string chosen;
  const std::string advice = OpenBlasCoreAdvice(&chosen);
  EXPECT_FALSE(chosen.empty()) << "OpenBLAS names the core it runs";
  if (before == nullptr) {
    EXPECT_TRUE(advice.empty() || advice == "SkylakeX" || advice == "Haswell" ||
                advice == "Sandybridge")
        << advice;
    EXPECT_NE(advice, chosen) << "no advice to use the core already in use";
    setenv("OPENBLAS_CORETYPE", "Prescott", 1);
    EXPECT_EQ(OpenBlasCoreAdvice(&chosen), "") << "the user's choice stands";
    unsetenv("OPENBLAS_CORETYPE");
  } else {
    EXPECT_EQ(advice, "");
  }
}

TEST(DenseOps, ScopedFlushDenormalsFlushesThenRestores) {
#if !defined(__x86_64__) && !defined(__i386__)
  GTEST_SKIP() << "denormals are flushed on x86 only";
#endif
  volatile float a = 1e-20f, b = 1e-19f;  // a * b = 1e-39 is denormal
  volatile float denormal = 1e-39f;
  ASSERT_NE(a * b, 0.0f);
  {
    ScopedFlushDenormals flush;
    EXPECT_EQ(a * b, 0.0f);                 // a denormal result is flushed
    EXPECT_EQ(denormal * 1.0f, 0.0f);       // a denormal input reads as zero
    EXPECT_EQ(a * 2.0f, 2e-20f);            // a normal value is untouched
    {
      ScopedFlushDenormals nested;
    }
    EXPECT_EQ(a * b, 0.0f);  // the inner scope restored the outer one's mode
  }
  EXPECT_NE(a * b, 0.0f);  // and the outer one the thread's own
  EXPECT_NE(denormal * 1.0f, 0.0f);
}

}  // namespace
}  // namespace ecps
