// The GPU step benchmark: samples/s of one whole training step (host inputs to host
// gradients, as the worker calls it) on one GPU, for the worker_bench model and ECRec's
// compute-heavy one, with the next batch staged while the current one trains; and NCCL's
// all-reduce time for each model's dense gradients. A plain program (no Google Benchmark on
// the device machine): deploy/gpu_check.sh runs it.
//
//   gpu_step_bench [STEPS] [GPUS]    default 50 timed steps per repeat, 1 GPU
// Prints one line per figure: name, median and range over 5 repeats.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_dense_math.h"
#include "kernels/cuda/test_batch.h"

namespace {

using ecps::DlrmConfig;
using ecps::gpu::testing::MakeTestStep;
using ecps::gpu::testing::TestOutput;
using ecps::gpu::testing::TestStep;

DlrmConfig WorkerBenchModel() {
  DlrmConfig m;
  m.num_dense = 13;
  m.num_sparse = 26;
  m.embedding_dim = 16;
  m.bottom_mlp = {128, 64, 16};
  m.top_mlp = {128, 64};
  return m;
}

DlrmConfig EcrecModel() {
  DlrmConfig m = WorkerBenchModel();
  m.embedding_dim = 128;
  m.bottom_mlp = {512, 256, 128};
  m.top_mlp = {1024, 1024, 512, 256};
  return m;
}

void Report(const char* name, std::vector<double> values, const char* unit) {
  std::sort(values.begin(), values.end());
  std::printf("%-34s median %12.1f %s (range %.1f - %.1f, %zu repeats)\n", name,
              values[values.size() / 2], unit, values.front(), values.back(), values.size());
}

int Bench(const char* name, const DlrmConfig& model, int steps, int gpus) {
  constexpr int kBatch = 2048;
  // Zipf(1.05) ids over 100,000 rows leave about a third of a batch's ids unique.
  const TestStep a = MakeTestStep(model, kBatch, 700, 1), b = MakeTestStep(model, kBatch, 700, 2);
  std::string error;
  auto math = ecps::gpu::CreateCudaDenseMath(model, kBatch, gpus, &error);
  if (math == nullptr) {
    std::fprintf(stderr, "%s: %s\n", name, error.c_str());
    return 1;
  }
  TestOutput out(a);
  out.out.probs = nullptr;
  const ecps::StepInput inputs[2] = {a.Input(), b.Input()};
  std::vector<double> rates;
  for (int rep = -1; rep < 5; ++rep) {  // one untimed warm-up
    const auto t0 = std::chrono::steady_clock::now();
    if (std::string e = math->Stage(inputs[0]); !e.empty()) {
      std::fprintf(stderr, "%s: %s\n", name, e.c_str());
      return 1;
    }
    for (int s = 0; s < steps; ++s) {
      // The next batch's copy overlaps this step's compute.
      std::string e = s + 1 < steps ? math->Stage(inputs[(s + 1) % 2]) : "";
      if (e.empty()) e = math->Train(inputs[s % 2], &out.out);
      if (!e.empty()) {
        std::fprintf(stderr, "%s: step %d: %s\n", name, s, e.c_str());
        return 1;
      }
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rep >= 0) rates.push_back(static_cast<double>(steps) * kBatch / seconds);
  }
  Report((std::string(name) + " samples/s").c_str(), rates, "samples/s");
  int64_t floats = 0;
  for (int64_t size : ecps::DenseTensorSizes(model)) floats += size;
  std::vector<double> us;
  for (int rep = 0; rep < 5; ++rep) {
    double median = 0.0;
    if (std::string e = ecps::gpu::TimeAllReduce(gpus, floats, 20, &median); !e.empty()) {
      std::printf("%s all-reduce: %s\n", name, e.c_str());
      return 0;
    }
    us.push_back(median);
  }
  Report((std::string(name) + " all-reduce " + std::to_string(floats) + " floats").c_str(), us,
         "us");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 50;
  const int gpus = argc > 2 ? std::atoi(argv[2]) : 1;
  std::printf("gpu_step_bench: %d CUDA device(s); %d GPU(s), %d steps per repeat, batch 2048\n",
              ecps::gpu::CudaDeviceCount(), gpus, steps);
  int rc = Bench("worker_bench model", WorkerBenchModel(), steps, gpus);
  rc |= Bench("ECRec model", EcrecModel(), std::max(1, steps / 5), gpus);
  return rc;
}
