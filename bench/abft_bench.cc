// abft_bench: the cost of checking the MLP's GEMMs (kernels/abft.h), on both benchmark models
// of worker_bench (quickstart 13-128-64-16 / 367-128-64-1, ECRec's heavy 13-512-256-128 /
// 479-1024-1024-512-256-1), batch 2048, one thread.
//
//   BM_Gemm/model:<0|1>/layer:<l>/gemm:<0 forward, 1 weight grad, 2 input grad>/scheme:<s>
//       one GEMM of one layer, unchecked (s = 0), global checksum (1), panel checksum (2), or
//       the selector's choice (3, reported as the counter `auto_is_panel`).
//   BM_Step/model:<0|1>/mode:<0 off, 1 detect, 2 auto, 3 all panel>
//       Dlrm::ForwardBackward: the whole dense step, every GEMM checked by the mode.
//
// Run, then tabulate overheads against the unchecked rows of the same run:
//   abft_bench --benchmark_repetitions=5 --benchmark_format=json > abft.json
//   python3 bench/abft_table.py abft.json
#include <cstdio>
#include <memory>
#include <vector>

#include "benchmark/benchmark.h"
#include "kernels/abft.h"
#include "kernels/dense_ops.h"
#include "kernels/dlrm.h"

namespace ecps {
namespace {

constexpr int kBatch = 2048;

DlrmConfig Model(int heavy) {
  DlrmConfig c;
  c.num_dense = 13;
  c.num_sparse = 26;
  c.embedding_dim = heavy ? 128 : 16;
  c.bottom_mlp = heavy ? std::vector<int>{512, 256, 128} : std::vector<int>{128, 64, 16};
  c.top_mlp = heavy ? std::vector<int>{1024, 1024, 512, 256} : std::vector<int>{128, 64};
  return c;
}

// (in, out) of every linear layer, bottom then top, the output layer last.
std::vector<std::pair<int, int>> Layers(const DlrmConfig& c) {
  std::vector<std::pair<int, int>> out;
  int in = c.num_dense;
  for (int w : c.bottom_mlp) out.push_back({in, w}), in = w;
  const int vectors = c.num_sparse + 1;
  in = c.embedding_dim + vectors * (vectors - 1) / 2;
  for (int w : c.top_mlp) out.push_back({in, w}), in = w;
  out.push_back({in, 1});
  return out;
}

const MachineBalance& Balance() {
  static const MachineBalance* balance = [] {
    auto* b = new MachineBalance(MeasureMachineBalance());
    std::fprintf(stderr, "abft_bench: %s\n", b->ToString().c_str());
    return b;
  }();
  return *balance;
}

void BM_Gemm(benchmark::State& state) {
  const auto layers = Layers(Model(static_cast<int>(state.range(0))));
  const size_t l = static_cast<size_t>(state.range(1));
  if (l >= layers.size()) return state.SkipWithError("no such layer");
  const auto [in, out] = layers[l];
  GemmCall g;
  switch (state.range(2)) {
    case 0: g = {false, true, kBatch, out, in, nullptr, in, nullptr, in, nullptr, out}; break;
    case 1: g = {true, false, out, in, kBatch, nullptr, out, nullptr, in, nullptr, in}; break;
    default: g = {false, false, kBatch, in, out, nullptr, out, nullptr, in, nullptr, in}; break;
  }
  std::vector<float> a(static_cast<size_t>(g.ta ? g.k : g.m) * g.lda),
      b(static_cast<size_t>(g.tb ? g.n : g.k) * g.ldb), c(static_cast<size_t>(g.m) * g.ldc);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 13) * 0.1f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i % 7) * 0.01f - 0.03f;
  g.a = a.data(), g.b = b.data(), g.c = c.data();
  const AbftScheme schemes[] = {AbftScheme::kNone, AbftScheme::kGlobal, AbftScheme::kPanel,
                                SelectScheme(g.m, g.n, g.k, Balance())};
  const AbftScheme scheme = schemes[state.range(3)];
  ScopedFlushDenormals flush;
  int misses = 0;
  for (auto _ : state) misses += CheckedGemm(g, scheme).misses;
  if (misses > 0) state.SkipWithError("a clean GEMM failed its check");
  state.counters["intensity"] = ArithmeticIntensity(g.m, g.n, g.k);
  state.counters["auto_is_panel"] = schemes[3] == AbftScheme::kPanel;
}

void GemmArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"model", "layer", "gemm", "scheme"});
  for (int model : {0, 1}) {
    const int layers = static_cast<int>(Layers(Model(model)).size());
    for (int l = 0; l < layers; ++l) {
      for (int gemm : {0, 1, 2}) {
        if (l == 0 && gemm == 2) continue;  // the dense features' gradient is never computed
        for (int s : {0, 1, 2, 3}) b->Args({model, l, gemm, s});
      }
    }
  }
}
BENCHMARK(BM_Gemm)->Apply(GemmArgs)->Unit(benchmark::kMicrosecond)->MinTime(0.05);

void BM_Step(benchmark::State& state) {
  const DlrmConfig cfg = Model(static_cast<int>(state.range(0)));
  auto model = Dlrm::Create(cfg, kBatch);
  if (!model.ok()) return state.SkipWithError("model");
  Dlrm& m = **model;
  // mode 3: every GEMM on panels (a balance no GEMM's intensity reaches).
  MachineBalance all_panel;
  all_panel.gflops = 1e12, all_panel.gbytes_per_s = 1;
  const AbftMode modes[] = {AbftMode::kOff, AbftMode::kDetect, AbftMode::kAuto, AbftMode::kAuto};
  m.SetAbft(modes[state.range(1)], state.range(1) == 3 ? all_panel : Balance());
  std::vector<std::vector<float>> params, grads;
  m.InitDense(1, &params);
  std::vector<const float*> pp;
  std::vector<float*> gp;
  grads.resize(params.size());
  for (size_t t = 0; t < params.size(); ++t) {
    pp.push_back(params[t].data());
    grads[t].resize(params[t].size());
    gp.push_back(grads[t].data());
  }
  const int dim = cfg.embedding_dim;
  std::vector<float> dense(static_cast<size_t>(kBatch) * cfg.num_dense), labels(kBatch),
      pooled(static_cast<size_t>(kBatch) * cfg.num_sparse * dim), d_pooled(pooled.size());
  for (size_t i = 0; i < dense.size(); ++i) dense[i] = 0.1f * static_cast<float>(i % 11);
  for (size_t i = 0; i < pooled.size(); ++i) pooled[i] = 0.01f * static_cast<float>(i % 17) - 0.08f;
  for (int i = 0; i < kBatch; ++i) labels[i] = static_cast<float>(i % 4 == 0);
  int misses = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(m.ForwardBackward(kBatch, dense.data(), pooled.data(),
                                               labels.data(), pp, d_pooled.data(), gp));
    misses += m.abft_misses();
  }
  if (misses > 0) state.SkipWithError("a clean step failed its checks");
}
BENCHMARK(BM_Step)
    ->ArgNames({"model", "mode"})
    ->ArgsProduct({{0, 1}, {0, 1, 2, 3}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace ecps

BENCHMARK_MAIN();
