// worker_bench: one worker's training step with no network, on the quickstart-sized model:
// 26 tables x 100,000 rows, embedding_dim 16, bottom MLP 13-128-64-16, top MLP 367-128-64-1,
// batch 2048, sparse adagrad, dense adam. items_per_second = training samples/s.
//
//   BM_TrainStep/<threads>:             LocalTrainer::StepOnBatch on pre-generated batches:
//                                       dedupe, gather, pool, forward+backward, row-gradient
//                                       aggregation, sparse and dense optimizer updates, on
//                                       cluster.worker_threads = <threads>.
//   BM_TrainStepBlasThreads/<n>:        the same on one thread with BLAS on n (the old way).
//   BM_TrainStepHeavy[BlasThreads]/<n>: the same on ECRec's compute-heavy model (HeavyJob).
//   BM_TrainStep[Heavy]OpenBlas/<n>:    the same with the GEMMs on OpenBLAS rather than the
//                                       default (oneDNN where the build has it).
//   BM_ForwardBackward/threads:<n>/heavy:<0|1>: Dlrm::ForwardBackward only (the dense math),
//                                       on the quickstart (0) or the heavy (1) model.
//   BM_SyntheticBatch:                  generating one batch of synthetic data.
//
// Run: worker_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "benchmark/benchmark.h"
#include "kernels/dense_ops.h"
#include "kernels/dlrm.h"
#include "domain/spec_config.h"
#include "worker/data.h"
#include "worker/local_trainer.h"

namespace ecps {
namespace {

constexpr int kBatch = 2048;
constexpr int kBatches = 8;

JobSpec QuickstartJob() {
  JobSpec s;
  s.model.embedding_dim = 16;
  s.model.bottom_mlp = {128, 64, 16};
  s.model.top_mlp = {128, 64};
  s.model.table_rows.assign(26, 100000);
  s.data.batch_size = kBatch;
  return s;
}

// ECRec's compute-heavy model: dim 128, bottom 13-512-256-128, top 479-1024-1024-512-256-1,
// with fewer rows (26 x 20,000) so that it fits here.
JobSpec HeavyJob() {
  JobSpec s;
  s.model.embedding_dim = 128;
  s.model.bottom_mlp = {512, 256, 128};
  s.model.top_mlp = {1024, 1024, 512, 256};
  s.model.table_rows.assign(26, 20000);
  s.data.batch_size = kBatch;
  return s;
}

std::vector<Batch> MakeBatches(const JobSpec& s) {
  auto src = MakeDataSource(s.data, s.model, s.job.seed, 0, 1, false);
  std::vector<Batch> out(kBatches);
  for (auto& b : out) (void)(*src)->Next(kBatch, &b);
  return out;
}

// The whole step on `threads` threads (cluster.worker_threads; BLAS single-threaded), or
// with blas_threads > 0 the step on one thread and BLAS on blas_threads (the code before the
// step was parallel), for a side-by-side ratio.
void TrainStep(benchmark::State& state, JobSpec spec, int threads, int blas_threads,
               GemmLibrary gemm = CurrentGemmLibrary()) {
  const GemmLibrary was = CurrentGemmLibrary();
  if (!SetGemmLibrary(gemm)) {
    state.SkipWithError("this build has no oneDNN");
    return;
  }
  // Every way out leaves the next benchmark the defaults.
  absl::Cleanup restore = [was] {
    SetBlasThreads(1);
    SetGemmLibrary(was);
  };
  state.SetLabel(GemmLibraryName(gemm));
  spec.cluster.worker_threads = threads;
  auto trainer = LocalTrainer::Create(spec);
  if (blas_threads > 0) SetBlasThreads(blas_threads);
  if (!trainer.ok()) {
    state.SkipWithError(trainer.status().ToString().c_str());
    return;
  }
  const std::vector<Batch> batches = MakeBatches(spec);
  for (int i = 0; i < kBatches; ++i) (*trainer)->StepOnBatch(batches[i]);  // warm up
  int i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize((*trainer)->StepOnBatch(batches[i++ % kBatches]));
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}
void BM_TrainStep(benchmark::State& state) {
  TrainStep(state, QuickstartJob(), static_cast<int>(state.range(0)), 0);
}
BENCHMARK(BM_TrainStep)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
void BM_TrainStepBlasThreads(benchmark::State& state) {
  TrainStep(state, QuickstartJob(), 1, static_cast<int>(state.range(0)));
}
BENCHMARK(BM_TrainStepBlasThreads)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
void BM_TrainStepHeavy(benchmark::State& state) {
  TrainStep(state, HeavyJob(), static_cast<int>(state.range(0)), 0);
}
BENCHMARK(BM_TrainStepHeavy)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
void BM_TrainStepHeavyBlasThreads(benchmark::State& state) {
  TrainStep(state, HeavyJob(), 1, static_cast<int>(state.range(0)));
}
BENCHMARK(BM_TrainStepHeavyBlasThreads)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
void BM_TrainStepOpenBlas(benchmark::State& state) {
  TrainStep(state, QuickstartJob(), static_cast<int>(state.range(0)), 0, GemmLibrary::kOpenBlas);
}
BENCHMARK(BM_TrainStepOpenBlas)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
void BM_TrainStepHeavyOpenBlas(benchmark::State& state) {
  TrainStep(state, HeavyJob(), static_cast<int>(state.range(0)), 0, GemmLibrary::kOpenBlas);
}
BENCHMARK(BM_TrainStepHeavyOpenBlas)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_ForwardBackward(benchmark::State& state) {
  SetBlasThreads(1);
  const JobSpec spec = state.range(1) != 0 ? HeavyJob() : QuickstartJob();
  const int dim = spec.model.embedding_dim;
  auto model = Dlrm::Create(ToDlrmConfig(spec.model), kBatch, static_cast<int>(state.range(0)));
  std::vector<std::vector<float>> params, grads;
  (*model)->InitDense(1, &params);
  std::vector<const float*> pp;
  std::vector<float*> gp;
  for (auto& p : params) {
    grads.emplace_back(p.size());
    pp.push_back(p.data());
    gp.push_back(grads.back().data());
  }
  const std::vector<Batch> batches = MakeBatches(spec);
  std::vector<float> pooled(static_cast<size_t>(kBatch) * 26 * dim, 0.01f), d_pooled(pooled.size());
  for (size_t i = 0; i < pooled.size(); ++i) pooled[i] = 0.01f * static_cast<float>(i % 17) - 0.08f;
  for (auto _ : state) {
    benchmark::DoNotOptimize((*model)->ForwardBackward(kBatch, batches[0].dense.data(),
                                                       pooled.data(), batches[0].labels.data(), pp,
                                                       d_pooled.data(), gp));
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
  state.counters["GFLOP/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * kBatch * 3 * 2 *
                             static_cast<double>((*model)->ForwardMacsPerSample()) / 1e9,
                         benchmark::Counter::kIsRate);
  SetBlasThreads(1);
}
BENCHMARK(BM_ForwardBackward)
    ->ArgsProduct({{1, 2}, {0, 1}})
    ->ArgNames({"threads", "heavy"})
    ->Unit(benchmark::kMillisecond)->UseRealTime();

// The interaction of one batch on one thread: 27 vectors (the bottom MLP's output and 26
// pooled embeddings) of dim 16 (quickstart) or 128 (heavy); forward (0) or backward (1).
void BM_Interaction(benchmark::State& state) {
  const int dim = static_cast<int>(state.range(0)), vectors = 27;
  const int pairs = InteractionPairs(vectors), stride = dim + pairs;
  std::vector<float> first(static_cast<size_t>(kBatch) * dim), d_first(first.size());
  std::vector<float> rest(first.size() * (vectors - 1)), d_rest(rest.size());
  std::vector<float> out(static_cast<size_t>(kBatch) * stride);
  std::vector<float> scratch(InteractionScratchFloats(vectors, dim));
  for (size_t i = 0; i < first.size(); ++i) first[i] = 0.01f * static_cast<float>(i % 23) - 0.1f;
  for (size_t i = 0; i < rest.size(); ++i) rest[i] = 0.01f * static_cast<float>(i % 29) - 0.14f;
  for (size_t i = 0; i < out.size(); ++i) out[i] = 0.001f * static_cast<float>(i % 31) - 0.015f;
  for (auto _ : state) {
    if (state.range(1) == 0) {
      InteractionForward(kBatch, vectors, dim, first.data(), rest.data(), out.data() + dim,
                         stride, scratch.data());
      benchmark::DoNotOptimize(out.data());
    } else {
      InteractionBackward(kBatch, vectors, dim, first.data(), rest.data(), out.data() + dim,
                          stride, d_first.data(), d_rest.data(), scratch.data());
      benchmark::DoNotOptimize(d_rest.data());
    }
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}
BENCHMARK(BM_Interaction)
    ->ArgsProduct({{16, 128}, {0, 1}})
    ->ArgNames({"dim", "backward"})
    ->Unit(benchmark::kMicrosecond);

void BM_SyntheticBatch(benchmark::State& state) {
  const JobSpec spec = QuickstartJob();
  auto src = MakeDataSource(spec.data, spec.model, spec.job.seed, 0, 1, false);
  Batch b;
  for (auto _ : state) benchmark::DoNotOptimize((*src)->Next(kBatch, &b));
  state.SetItemsProcessed(state.iterations() * kBatch);
}
BENCHMARK(BM_SyntheticBatch)->Unit(benchmark::kMillisecond);

// Dedupe of one synthetic batch (26 tables): the worker does this for every batch it reads.
void BM_Dedupe(benchmark::State& state) {
  const JobSpec spec = QuickstartJob();
  auto src = MakeDataSource(spec.data, spec.model, spec.job.seed, 0, 1, false);
  Batch b;
  (void)(*src)->Next(kBatch, &b);
  UniqueIds u;
  for (auto _ : state) {
    Dedupe(b, spec.model.num_sparse, &u);
    benchmark::DoNotOptimize(u.index.data());
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}
BENCHMARK(BM_Dedupe)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace ecps

// --openblas_core_advice prints "CORE CHOSEN" when the core OpenBLAS runs, CHOSEN, uses
// narrower vectors than the CPU's widest, CORE being the one for those; nothing otherwise; and
// exits. Unlike the worker's warning (OpenBlasCoreAdvice) it answers also when the core came
// from OPENBLAS_CORETYPE: bench/worker_vs_torch.sh asks it before running either side, so that
// PyTorch's peer is not measured below its best.
int main(int argc, char** argv) {
  if (argc == 2 && std::string_view(argv[1]) == "--openblas_core_advice") {
    const std::string chosen = ecps::OpenBlasCoreName();
    const std::string core = ecps::OpenBlasCoreFor(chosen, ecps::CpuVectorLevel());
    if (!core.empty()) std::printf("%s %s\n", core.c_str(), chosen.c_str());
    return 0;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
