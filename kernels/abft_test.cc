#include "kernels/abft.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <vector>

#include "kernels/dense_ops.h"
#include "kernels/dlrm.h"
#include "kernels/abft_test_util.h"
#include "kernels/hash_rng.h"

namespace ecps {
namespace {

// Operands shaped as a DLRM layer's: activations after a ReLU (half zero), Xavier weights.
struct Operands {
  std::vector<float> a, b;
};
Operands MakeOperands(const GemmCall& shape, uint64_t seed) {
  Operands o;
  o.a.resize(static_cast<size_t>(shape.ta ? shape.k : shape.m) * shape.lda);
  o.b.resize(static_cast<size_t>(shape.tb ? shape.n : shape.k) * shape.ldb);
  for (size_t i = 0; i < o.a.size(); ++i) {
    const float v = 2.0f * UnitFloat(Mix64(HashOf(seed, 1, i))) - 1.0f;
    o.a[i] = v > 0 ? v : 0.0f;
  }
  const float bound = std::sqrt(6.0f / static_cast<float>(shape.k + shape.n));
  for (size_t i = 0; i < o.b.size(); ++i) {
    o.b[i] = (2.0f * UnitFloat(Mix64(HashOf(seed, 2, i))) - 1.0f) * bound;
  }
  return o;
}

// The three GEMMs of every layer of both benchmark models (bench/worker_bench.cc) at batch
// 2048: quickstart 13-128-64-16 / 367-128-64-1, heavy 13-512-256-128 / 479-1024-1024-512-256-1.
std::vector<GemmCall> BenchShapes() {
  const int batch = 2048;
  const std::vector<std::pair<int, int>> layers = {
      {13, 128},  {128, 64},    {64, 16},    {367, 128},  {128, 64},  {64, 1},
      {13, 512},  {512, 256},   {256, 128},  {479, 1024}, {1024, 1024},
      {1024, 512}, {512, 256},  {256, 1}};
  std::vector<GemmCall> out;
  for (const auto& [in, o] : layers) {
    out.push_back({false, true, batch, o, in, nullptr, in, nullptr, in, nullptr, o});  // y
    out.push_back({true, false, o, in, batch, nullptr, o, nullptr, in, nullptr, in});   // dw
    out.push_back({false, false, batch, in, o, nullptr, o, nullptr, in, nullptr, in});  // dx
  }
  return out;
}

double Rms(const std::vector<float>& c) {
  double s = 0;
  for (float v : c) s += static_cast<double>(v) * v;
  return std::sqrt(s / c.size());
}

TEST(AbftTest, CleanGemmsPassWithRoomToSpare) {
  for (AbftScheme scheme : {AbftScheme::kGlobal, AbftScheme::kPanel}) {
    for (GemmCall g : BenchShapes()) {
      Operands o = MakeOperands(g, 7);
      std::vector<float> c(static_cast<size_t>(g.m) * g.ldc);
      g.a = o.a.data(), g.b = o.b.data(), g.c = c.data();
      const AbftResult r = CheckedGemm(g, scheme);
      EXPECT_EQ(r.misses, 0) << AbftSchemeName(scheme) << " m=" << g.m << " n=" << g.n
                             << " k=" << g.k;
      // The bound is lambda = 8 standard deviations of the rounding's sum; a clean column
      // beyond 6 of them (a chance of 2e-9) would say the model of the rounding is wrong.
      EXPECT_LT(r.margin, 0.75) << AbftSchemeName(scheme) << " m=" << g.m << " n=" << g.n
                               << " k=" << g.k;
    }
  }
}

// A flip of bit 20 changes a float by 1/16 to 1/8 of its size. Every such flip in an element at
// least the output's RMS is caught by the panel scheme on every layer shape, and by the global
// one wherever it moves the checksum by more than twice the bound (a few elements of the widest
// GEMMs fall under it); flips of higher bits always.
TEST(AbftTest, OutputFlipsAboveTheBoundAreCaught) {
  int global_below = 0;
  for (AbftScheme scheme : {AbftScheme::kGlobal, AbftScheme::kPanel}) {
    for (GemmCall g : BenchShapes()) {
      Operands o = MakeOperands(g, 11);
      std::vector<float> clean(static_cast<size_t>(g.m) * g.ldc), c(clean.size());
      g.a = o.a.data(), g.b = o.b.data(), g.c = clean.data();
      ASSERT_EQ(CheckedGemm(g, AbftScheme::kNone).misses, 0);
      const double rms = Rms(clean);
      int tried = 0;
      for (uint64_t e = 0; e < clean.size() && tried < 4; e += clean.size() / 97 + 1) {
        if (std::fabs(clean[e]) < rms) continue;  // only elements of a typical size or larger
        ++tried;
        for (int bit : {20, 23, 27, 30}) {
          OneFlip flip(3, {GemmFault::kOutput, static_cast<int64_t>(e), bit});
          g.c = c.data();
          const AbftResult r = CheckedGemm(g, scheme, 3, &flip);
          ASSERT_TRUE(flip.used());
          // The global scheme's bound (p = m) can exceed a bit-20 change of an element near
          // the RMS on the widest GEMMs; there it must catch what is above twice its bound.
          if (scheme == AbftScheme::kGlobal && bit == 20) {
            float flipped = clean[e];
            FlipBit(&flipped, bit);
            const int j = static_cast<int>(e % g.ldc);
            double a2 = 0, b2 = 0;
            for (float v : o.a) a2 += static_cast<double>(v) * v;
            for (int i = 0; i < g.k; ++i) {
              const double v = g.tb ? o.b[static_cast<size_t>(j) * g.ldb + i]
                                    : o.b[static_cast<size_t>(i) * g.ldb + j];
              b2 += v * v;
            }
            const double bound = ColumnBound(g.m, g.k, std::sqrt(a2), std::sqrt(b2));
            if (std::fabs(static_cast<double>(flipped) - clean[e]) <= 2 * bound) {
              ++global_below;
              continue;
            }
          }
          EXPECT_GT(r.misses, 0) << AbftSchemeName(scheme) << " m=" << g.m << " n=" << g.n
                                 << " k=" << g.k << " element " << e << " bit " << bit;
        }
      }
      EXPECT_GT(tried, 0);
    }
  }
  std::printf("bit-20 flips under the global bound: %d\n", global_below);
  // Of 14 layers x 3 GEMMs x 4 elements, 7 (all on the heavy model's widest GEMMs) when
  // written, 8 since the bound's sqrt(2k + 12) (the layer checks' float block sums); more
  // would mean the bound loosened further.
  EXPECT_LE(global_below, 8);
}

// A flip in what the GEMM reads of A or B spreads over a row or a column of C; it is caught
// whenever a column's checksum moves by more than twice the bound.
TEST(AbftTest, InputFlipsAboveTheBoundAreCaught) {
  int caught = 0;
  for (AbftScheme scheme : {AbftScheme::kGlobal, AbftScheme::kPanel}) {
    for (GemmCall g : BenchShapes()) {
      Operands o = MakeOperands(g, 13);
      std::vector<float> clean(static_cast<size_t>(g.m) * g.ldc), c(clean.size());
      g.a = o.a.data(), g.b = o.b.data(), g.c = clean.data();
      ASSERT_EQ(CheckedGemm(g, AbftScheme::kNone).misses, 0);
      for (auto where : {GemmFault::kInputA, GemmFault::kInputB}) {
        const std::vector<float>& src = where == GemmFault::kInputA ? o.a : o.b;
        // The largest element: a flip there moves the most.
        int64_t e = 0;
        for (size_t i = 0; i < src.size(); ++i) {
          if (std::fabs(src[i]) > std::fabs(src[e])) e = static_cast<int64_t>(i);
        }
        for (int bit : {20, 22, 26, 30}) {
          OneFlip flip(5, {where, e, bit});
          g.c = c.data();
          const AbftResult r = CheckedGemm(g, scheme, 5, &flip);
          // The largest move of a column's sum over all rows (a panel's is no smaller for the
          // one panel a flipped A row lands in; for B every panel moves).
          double worst = 0, worst_bound = 0;
          for (int j = 0; j < g.n; ++j) {
            double d = 0;
            for (int r = 0; r < g.m; ++r) {
              d += static_cast<double>(c[static_cast<size_t>(r) * g.ldc + j]) -
                   clean[static_cast<size_t>(r) * g.ldc + j];
            }
            worst = std::max(worst, std::fabs(d));
          }
          // The global bound is the loosest a column gets (p = m); above twice it, both catch.
          double a2 = 0;
          for (float v : o.a) a2 += static_cast<double>(v) * v;
          double bmax = 0;
          for (float v : o.b) bmax = std::max(bmax, static_cast<double>(std::fabs(v)));
          worst_bound = ColumnBound(g.m, g.k, std::sqrt(a2), bmax * std::sqrt(g.k));
          if (worst > 2 * worst_bound) {
            EXPECT_GT(r.misses, 0) << "m=" << g.m << " n=" << g.n << " k=" << g.k << " bit "
                                   << bit;
            ++caught;
          }
        }
      }
    }
  }
  EXPECT_GT(caught, 0);
}

TEST(AbftTest, TheSelectorFollowsIntensityAgainstBalance) {
  MachineBalance balance;
  balance.gflops = 100, balance.gbytes_per_s = 10;  // 10 flop/byte
  // 2 m n k / 4 (mk + kn + mn)
  EXPECT_NEAR(ArithmeticIntensity(2048, 1024, 1024), 204.8, 1e-9);
  EXPECT_EQ(SelectScheme(2048, 1024, 1024, balance), AbftScheme::kGlobal);  // 205 flop/byte
  EXPECT_EQ(SelectScheme(2048, 512, 13, balance), AbftScheme::kPanel);      // 6
  EXPECT_EQ(SelectScheme(2048, 1, 64, balance), AbftScheme::kPanel);        // 0.5
  // Memory-bound, but A, B and C (1.1 MB) fit the cache: re-reading them there is cheap.
  balance.cache_bytes = 2 << 20;
  EXPECT_EQ(SelectScheme(2048, 128, 13, balance), AbftScheme::kGlobal);
  EXPECT_EQ(SelectScheme(8192, 128, 13, balance), AbftScheme::kPanel);  // 4.5 MB do not
  const MachineBalance measured = MeasureMachineBalance();
  EXPECT_GT(measured.gflops, 0);
  EXPECT_GT(measured.gbytes_per_s, 0);
}

TEST(AbftTest, BoundGrowsWithShapesAsDerived) {
  // sqrt(2k + 12) in the float part; linear in both norms.
  const double b1 = ColumnBound(64, 128, 1.0, 1.0), b4 = ColumnBound(64, 512, 1.0, 1.0);
  EXPECT_NEAR(b4 / b1,
              std::sqrt(1036.0 / 268.0) * (1 + 2 * 512 * 0x1p-24) / (1 + 2 * 128 * 0x1p-24),
              1e-3);
  EXPECT_NEAR(ColumnBound(64, 128, 2.0, 3.0) / b1, 6.0, 1e-6);
}

// ECPS_GEMM_FAULTS' list: each fault on its site's chosen run only, the rest untouched; a
// malformed entry is named.
TEST(AbftTest, ListedGemmFaultsFireOnTheirRunOnly) {
  auto faults = ParseGemmFaults("4:2:30, 1:1:7");
  ASSERT_TRUE(faults.ok()) << faults.status();
  const GemmCall call;
  GemmFault fault;
  EXPECT_FALSE((*faults)->Inject(4, call, &fault));  // site 4, run 1
  EXPECT_TRUE((*faults)->Inject(1, call, &fault));   // site 1, run 1
  EXPECT_EQ(fault.bit, 7);
  EXPECT_EQ(fault.where, GemmFault::kOutput);
  EXPECT_EQ(fault.element, 0);
  EXPECT_TRUE((*faults)->Inject(4, call, &fault));  // site 4, run 2
  EXPECT_EQ(fault.bit, 30);
  EXPECT_FALSE((*faults)->Inject(4, call, &fault));
  EXPECT_FALSE((*faults)->Inject(1, call, &fault));
  for (const char* bad : {"", "4:2", "4:0:30", "4:2:32", "a:1:1", "1:1:1,2:x:3"}) {
    auto parsed = ParseGemmFaults(bad);
    EXPECT_TRUE(absl::IsInvalidArgument(parsed.status())) << bad;
  }
  EXPECT_NE(ParseGemmFaults("1:1:1,2:x:3").status().message().find("\"2:x:3\""),
            std::string::npos);
}

// The model: a flip in any of its GEMMs is counted, and a pass without it gives back the
// fault-free gradients bit for bit (what the worker's recompute relies on).
TEST(AbftTest, DlrmCountsAFlipAndARecomputeIsClean) {
  DlrmConfig cfg;
  cfg.num_dense = 13, cfg.num_sparse = 4, cfg.embedding_dim = 16;
  cfg.bottom_mlp = {64, 16};
  cfg.top_mlp = {32};
  const int batch = 256;
  auto model = Dlrm::Create(cfg, batch);
  ASSERT_TRUE(model.ok());
  Dlrm& m = **model;
  std::vector<std::vector<float>> params;
  m.InitDense(3, &params);
  std::vector<const float*> p;
  for (auto& t : params) p.push_back(t.data());
  std::vector<float> dense(batch * cfg.num_dense), pooled(batch * cfg.num_sparse * 16),
      labels(batch), d_pooled(pooled.size());
  for (size_t i = 0; i < dense.size(); ++i) dense[i] = UnitFloat(Mix64(i));
  for (size_t i = 0; i < pooled.size(); ++i) pooled[i] = UnitFloat(Mix64(i + 99)) - 0.5f;
  for (int i = 0; i < batch; ++i) labels[i] = i % 3 == 0;
  auto run = [&](std::vector<std::vector<float>>* g) {
    g->assign(params.size(), {});
    std::vector<float*> gp;
    for (size_t t = 0; t < params.size(); ++t) {
      (*g)[t].resize(params[t].size());
      gp.push_back((*g)[t].data());
    }
    return m.ForwardBackward(batch, dense.data(), pooled.data(), labels.data(), p,
                             d_pooled.data(), gp);
  };
  m.SetAbft(AbftMode::kAuto, MeasureMachineBalance());
  std::vector<std::vector<float>> clean, bad, again;
  const float loss = run(&clean);
  EXPECT_EQ(m.abft_misses(), 0);
  EXPECT_NE(m.AbftPlan().find("top.1 forward="), std::string::npos);
  // Sites: layer l's forward 3l, weight grad 3l+1, input grad 3l+2; bottom.1 is layer 1.
  int caught = 0;
  for (int site : {0, 1, 3, 4, 5, 6, 7, 8}) {
    // Bit 30 makes any element of these layers (all below 2 in size) at least 2.
    OneFlip flip(site, {GemmFault::kOutput, 5, 30});
    m.SetAbft(AbftMode::kAuto, MeasureMachineBalance(), &flip);
    run(&bad);
    EXPECT_TRUE(flip.used()) << site;
    if (m.abft_misses() > 0) {
      ++caught;
    } else {
      // Erased by what follows the GEMM (the ReLU of a negative output, the mask on a gradient):
      // raised, cleared by the confirmation, and the pass's gradients are the clean ones.
      EXPECT_GT(m.abft_cleared(), 0) << site;
      EXPECT_EQ(bad, clean) << site;
    }
    m.SetAbft(AbftMode::kAuto, MeasureMachineBalance());
    EXPECT_EQ(run(&again), loss);
    EXPECT_EQ(m.abft_misses(), 0);
    EXPECT_EQ(again, clean) << site;
  }
  EXPECT_GE(caught, 3);  // the three weight gradients at least: nothing follows those GEMMs
  // Off: the same flip goes unseen.
  OneFlip flip(0, {GemmFault::kOutput, 5, 26});
  m.SetAbft(AbftMode::kOff, MachineBalance{}, &flip);
  run(&bad);
  EXPECT_EQ(m.abft_misses(), 0);
}

}  // namespace
}  // namespace ecps

namespace ecps {
namespace {

// Values that repeat round alike: a dot product of equal terms is summed with rounding errors
// of one sign, and rows that repeat (a batch whose samples repeat) give every row of a column
// the same error, so the errors add up over the column as p, not as sqrt(p). A clean GEMM then
// misses the probabilistic bound. The confirmation computes it again, finds the same bits
// within the deterministic rounding bound, and clears the alarm. A flip on the same data still
// counts, whether it strikes one run or every run.
TEST(AbftTest, RepeatedValuesMissTheBoundAndTheConfirmationClearsThem) {
  GemmCall g{false, true, 2048, 64, 2048, nullptr, 2048, nullptr, 2048, nullptr, 64};
  Operands o;
  o.a.assign(static_cast<size_t>(g.m) * g.lda, 1.0f);
  o.b.resize(static_cast<size_t>(g.n) * g.ldb);
  for (int j = 0; j < g.n; ++j) {
    std::fill(o.b.begin() + int64_t{j} * g.ldb, o.b.begin() + int64_t{j + 1} * g.ldb,
              0.1f * static_cast<float>(1 + j % 7));
  }
  g.a = o.a.data(), g.b = o.b.data();
  std::vector<float> plain(static_cast<size_t>(g.m) * g.n), c(plain.size());
  Sgemm(g.ta, g.tb, g.m, g.n, g.k, g.a, g.lda, g.b, g.ldb, 0.0f, plain.data(), g.ldc);
  for (AbftScheme scheme : {AbftScheme::kGlobal, AbftScheme::kPanel}) {
    g.c = c.data();
    const AbftResult clean = CheckedGemm(g, scheme);
    std::printf("%s: margin %.2f, %d columns cleared\n", AbftSchemeName(scheme), clean.margin,
                clean.cleared);
    if (scheme == AbftScheme::kGlobal) {  // p = 2048; a panel's few hundred rows stay under it
      EXPECT_GT(clean.margin, 1.0);  // stage one missed
      EXPECT_GT(clean.cleared, 0);
    }
    EXPECT_EQ(clean.misses, 0) << AbftSchemeName(scheme);
    EXPECT_EQ(c, plain) << AbftSchemeName(scheme);
  }
  OneFlip once(0, {GemmFault::kOutput, 5, 27});
  EXPECT_GT(CheckedGemm(g, AbftScheme::kGlobal, 0, &once).misses, 0);
  EveryRunFlip every_run({GemmFault::kOutput, 5, 27});
  EXPECT_GT(CheckedGemm(g, AbftScheme::kGlobal, 0, &every_run).misses, 0);
}

// The confirmation alone: a clean GEMM's columns, said to have missed, are cleared; a result
// that differs from a second run's, or an element outside the deterministic bound, is not.
TEST(AbftTest, ConfirmMissStandsByDifferingRunsAndElementsOutsideTheRounding) {
  GemmCall g{true, false, 256, 512, 2048, nullptr, 256, nullptr, 512, nullptr, 512};
  Operands o = MakeOperands(g, 11);
  std::vector<float> c(static_cast<size_t>(g.m) * g.ldc);
  g.a = o.a.data(), g.b = o.b.data(), g.c = c.data();
  Sgemm(g.ta, g.tb, g.m, g.n, g.k, g.a, g.lda, g.b, g.ldb, 0.0f, c.data(), g.ldc);
  const std::vector<int> columns = {0, 7, 511}, rows = {3, 255};
  EXPECT_FALSE(ConfirmMiss(g, 0, g.m, 0, nullptr, columns, false, nullptr));
  EXPECT_FALSE(ConfirmMiss(g, 0, g.m, 0, nullptr, rows, true, nullptr));
  EXPECT_FALSE(ConfirmMiss(g, 16, 32, 0, nullptr, columns, false, nullptr));  // one panel
  // What the caller did to C since, done to the second run too.
  std::vector<float> halved = c;
  for (float& v : halved) v *= 0.5f;
  g.c = halved.data();
  EXPECT_TRUE(ConfirmMiss(g, 0, g.m, 0, nullptr, columns, false, nullptr));
  EXPECT_FALSE(ConfirmMiss(g, 0, g.m, 0, nullptr, columns, false,
                           [&](float* r, int r0, int r1) {
                             for (int64_t i = 0; i < int64_t{r1 - r0} * g.ldc; ++i) r[i] *= 0.5f;
                           }));
  g.c = c.data();
  // One run struck (element 7 * 512 + 7 is in column 7 and row 7).
  std::vector<float> struck = c;
  FlipBit(&struck[7 * 512 + 7], 0);
  g.c = struck.data();
  EXPECT_TRUE(ConfirmMiss(g, 0, g.m, 0, nullptr, columns, false, nullptr));
  // Struck on every run: the same bits, but outside the rounding (bit 26), or inside it (bit 0:
  // a result a float GEMM may give).
  for (int bit : {26, 0}) {
    EveryRunFlip every_run({GemmFault::kOutput, 7 * 512 + 7, bit});
    struck = c;
    FlipBit(&struck[7 * 512 + 7], bit);
    EXPECT_EQ(ConfirmMiss(g, 0, g.m, 0, &every_run, columns, false, nullptr), bit == 26) << bit;
    EXPECT_EQ(ConfirmMiss(g, 0, g.m, 0, &every_run, {7}, true, nullptr), bit == 26) << bit;
    EXPECT_FALSE(ConfirmMiss(g, 0, g.m, 0, &every_run, {8}, true, nullptr)) << bit;
  }
}

// Clean steps of both benchmark models (batch 2048, every GEMM checked, panels forced on for
// half of the steps so that both schemes run), on fresh inputs each step and weights moved by
// SGD: no check may fire. ECPS_ABFT_CLEAN_STEPS sets the steps per model (default 20; the
// 10,000-step run of docs/abft.md sets it).
TEST(AbftTest, CleanStepsRaiseNoAlarm) {
  const char* env = std::getenv("ECPS_ABFT_CLEAN_STEPS");
  const int steps = env != nullptr ? std::atoi(env) : 20;
  const char* only = std::getenv("ECPS_ABFT_CLEAN_MODEL");  // "0" or "1": one model only
  for (int heavy : {0, 1}) {
    if (only != nullptr && std::atoi(only) != heavy) continue;
    DlrmConfig cfg;
    cfg.num_dense = 13, cfg.num_sparse = 26, cfg.embedding_dim = heavy ? 128 : 16;
    cfg.bottom_mlp = heavy ? std::vector<int>{512, 256, 128} : std::vector<int>{128, 64, 16};
    cfg.top_mlp = heavy ? std::vector<int>{1024, 1024, 512, 256} : std::vector<int>{128, 64};
    const int batch = 2048, dim = cfg.embedding_dim;
    auto model = Dlrm::Create(cfg, batch);
    ASSERT_TRUE(model.ok());
    Dlrm& m = **model;
    std::vector<std::vector<float>> params, grads;
    m.InitDense(17, &params);
    std::vector<const float*> p;
    std::vector<float*> g;
    grads.resize(params.size());
    for (size_t t = 0; t < params.size(); ++t) {
      p.push_back(params[t].data());
      grads[t].resize(params[t].size());
      g.push_back(grads[t].data());
    }
    std::vector<float> dense(static_cast<size_t>(batch) * 13), labels(batch),
        pooled(static_cast<size_t>(batch) * 26 * dim), d_pooled(pooled.size());
    const MachineBalance measured = MeasureMachineBalance();
    MachineBalance all_panel;
    all_panel.gflops = 1e12, all_panel.gbytes_per_s = 1;
    int64_t misses = 0, cleared = 0;
    for (int step = 0; step < steps; ++step) {
      m.SetAbft(AbftMode::kAuto, step % 2 ? all_panel : measured);
      const uint64_t seed = HashOf(heavy, step, 0x5eed);
      for (size_t i = 0; i < dense.size(); ++i) dense[i] = 3.0f * UnitFloat(Mix64(seed + i));
      for (size_t i = 0; i < pooled.size(); ++i) {
        pooled[i] = 0.1f * (UnitFloat(Mix64(seed ^ (i * 0x9E3779B97F4A7C15ull))) - 0.5f);
      }
      for (int b = 0; b < batch; ++b) labels[b] = (Mix64(seed + 7 * b) & 3) == 0;
      const float loss = m.ForwardBackward(batch, dense.data(), pooled.data(), labels.data(), p,
                                           d_pooled.data(), g);
      if (m.abft_misses() > 0 && misses == 0) {
        std::printf("first miss: step %d, %d columns, loss %g\n", step, m.abft_misses(), loss);
      }
      if (m.abft_cleared() > 0) {
        std::printf("step %d (%s): %d columns missed the bound and were cleared\n", step,
                    step % 2 ? "panels" : "layer checks", m.abft_cleared());
      }
      misses += m.abft_misses();
      cleared += m.abft_cleared();
      for (size_t t = 0; t < params.size(); ++t) {
        for (size_t i = 0; i < params[t].size(); ++i) params[t][i] -= 0.05f * grads[t][i];
      }
    }
    EXPECT_EQ(misses, 0) << (heavy ? "heavy" : "quickstart") << " over " << steps << " steps";
    std::printf("%s: %d clean steps, %lld misses, %lld columns cleared\n",
                heavy ? "heavy" : "quickstart", steps, static_cast<long long>(misses),
                static_cast<long long>(cleared));
  }
}

}  // namespace
}  // namespace ecps
