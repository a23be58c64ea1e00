// One ABFT bound for both paths (kernels/abft_bound.h): the CPU check's ColumnBound and the
// GPU check bodies (kernels/cuda/train_kernels.h) give the same value, and decide alike on
// the same GEMM.
#include "kernels/abft_bound.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/abft.h"
#include "kernels/abft_test_util.h"
#include "kernels/cuda/body_dense_math.h"

namespace ecps {
namespace {

TEST(AbftBound, TheGpuBodiesBoundIsTheCpuChecksBound) {
  for (int p : {1, 16, 96, 2048}) {
    for (int k : {1, 13, 64, 2048}) {
      for (double a : {0.0, 1e-3, 3.5, 1e4}) {
        for (double b : {0.0, 0.25, 7.0, 1e5}) {
          EXPECT_EQ(ColumnBound(p, k, a, b), AbftColumnBound(kAbftLambda, p, k, a, b))
              << "p " << p << " k " << k << " a " << a << " b " << b;
        }
      }
    }
  }
}

// The bodies' misses over a GEMM's output.
int BodyMisses(const GemmCall& call) {
  return gpu::CheckGemmOnCpu({call.ta, call.tb, call.m, call.n, call.k, call.a, call.lda, call.b,
                              call.ldb, call.c, call.ldc})
      .misses;
}

// The CPU's GEMM (oneDNN or OpenBLAS) checked by both: a clean one passes both, one with a
// flipped exponent bit misses both, in one column.
TEST(AbftBound, CpuAndBodyChecksDecideAlike) {
  for (bool ta : {false, true}) {
    GemmCall g;
    g.ta = ta;
    g.tb = !ta;
    g.m = 70, g.n = 33, g.k = 48;
    std::vector<float> a(static_cast<size_t>(g.m) * g.k), b(static_cast<size_t>(g.k) * g.n);
    std::vector<float> c(static_cast<size_t>(g.m) * g.n);
    for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>((i * 37) % 101) / 50 - 1;
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>((i * 13) % 89) / 110 - 0.4f;
    g.a = a.data(), g.lda = ta ? g.m : g.k;
    g.b = b.data(), g.ldb = g.tb ? g.k : g.n;
    g.c = c.data(), g.ldc = g.n;
    EXPECT_EQ(CheckedGemm(g, AbftScheme::kGlobal).misses, 0);
    EXPECT_EQ(BodyMisses(g), 0);
    EveryRunFlip flip({GemmFault::kOutput, 5 * g.ldc + 7, 30});
    EXPECT_EQ(CheckedGemm(g, AbftScheme::kGlobal, 0, &flip).misses, 1);
    EXPECT_EQ(BodyMisses(g), 1);
  }
}

}  // namespace
}  // namespace ecps
