// The GPU kernels' bodies (kernels/cuda/train_kernels.h), run on the CPU, against the CPU
// worker's own kernels: the same bits where both add in the same order (interaction, loss,
// bias gradient, row gradients, optimizers), and the whole step within float rounding of
// the CPU DenseMath (the GEMMs sum in another order). What a GPU runs is these bodies.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cuda/body_dense_math.h"
#include "kernels/cuda/step_plan.h"
#include "kernels/cuda/test_batch.h"
#include "kernels/cuda/train_kernels.h"
#include "kernels/dense_ops.h"
#include "kernels/dlrm.h"
#include "kernels/optimizers.h"
#include "kernels/cpu_dense_math.h"
#include "worker/gpu_plugin_loader.h"
#include "worker/step.h"

namespace ecps {
namespace {

using gpu::ForEachIndex;
using gpu::testing::MakeTestStep;
using gpu::testing::MaxRelativeError;
using gpu::testing::TestOutput;
using gpu::testing::TestStep;

std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// The bodies take z in one array (batch x vectors x dim); the CPU kernel takes its first
// vector and the rest apart: split z for it, and join its gradients back.
TEST(GpuBodies, InteractionIsTheCpuKernelsBits) {
  // 9 vectors fit one block of the kernels' 16 lanes; 27 (DLRM's 26 tables and the bottom
  // MLP's output) take a second, partly filled one.
  for (const std::pair<int, int>& shape :
       {std::pair{4, 9}, {16, 9}, {37, 9}, {128, 9}, {16, 27}, {37, 27}}) {
    // Not a structured binding: the lambdas below capture these (Clang 14 cannot).
    const int dim = shape.first, vectors = shape.second;
    const int batch = 5, pairs = InteractionPairs(vectors), stride = pairs + 3;
    const size_t sample = static_cast<size_t>(vectors) * dim;
    const std::vector<float> z = Random(batch * sample, dim);
    std::vector<float> first, rest;
    for (int b = 0; b < batch; ++b) {
      first.insert(first.end(), z.begin() + b * sample, z.begin() + b * sample + dim);
      rest.insert(rest.end(), z.begin() + b * sample + dim, z.begin() + (b + 1) * sample);
    }
    std::vector<float> cpu(static_cast<size_t>(batch) * stride, 0.0f), body = cpu;
    std::vector<float> scratch(InteractionScratchFloats(vectors, dim));
    InteractionForward(batch, vectors, dim, first.data(), rest.data(), cpu.data(), stride,
                       scratch.data());
    ForEachIndex(static_cast<int64_t>(batch) * pairs, [&](int64_t i) {
      gpu::InteractionForwardAt(i, vectors, dim, z.data(), body.data(), stride);
    });
    EXPECT_EQ(body, cpu) << "forward, dim " << dim << ", " << vectors << " vectors";

    const std::vector<float> d_out = Random(cpu.size(), dim + 1);
    std::vector<float> d_first(first.size()), d_rest(rest.size()), dz_body(z.size(), -1.0f);
    InteractionBackward(batch, vectors, dim, first.data(), rest.data(), d_out.data(), stride,
                        d_first.data(), d_rest.data(), scratch.data());
    std::vector<float> dz_cpu;
    for (int b = 0; b < batch; ++b) {
      dz_cpu.insert(dz_cpu.end(), d_first.begin() + b * dim, d_first.begin() + (b + 1) * dim);
      dz_cpu.insert(dz_cpu.end(), d_rest.begin() + b * (sample - dim),
                    d_rest.begin() + (b + 1) * (sample - dim));
    }
    ForEachIndex(static_cast<int64_t>(z.size()), [&](int64_t i) {
      gpu::InteractionBackwardAt(i, vectors, dim, z.data(), d_out.data(), stride, dz_body.data());
    });
    EXPECT_EQ(dz_body, dz_cpu) << "backward, dim " << dim << ", " << vectors << " vectors";
  }
}

TEST(GpuBodies, LossAndBiasGradientAreTheCpuKernelsBits) {
  const int batch = 300;
  const std::vector<float> logits = Random(batch, 3, 8.0f);
  std::vector<float> labels(batch);
  for (int b = 0; b < batch; ++b) labels[b] = b % 3 == 0 ? 1.0f : 0.0f;
  std::vector<float> d_cpu(batch), p_cpu(batch), d_body(batch), p_body(batch), loss(batch);
  const double total = BceWithLogitsSum(batch, logits.data(), labels.data(), 1.0f / batch,
                                        d_cpu.data(), p_cpu.data());
  ForEachIndex(batch, [&](int64_t b) {
    gpu::BceAt(b, logits.data(), labels.data(), 1.0f / batch, loss.data(), d_body.data(),
               p_body.data());
  });
  double body_total = 0.0;
  for (float l : loss) body_total += l;
  EXPECT_EQ(body_total, total);
  EXPECT_EQ(d_body, d_cpu);
  EXPECT_EQ(p_body, p_cpu);

  const int in = 7, out = 5;
  const std::vector<float> x = Random(static_cast<size_t>(batch) * in, 4);
  const std::vector<float> w = Random(static_cast<size_t>(out) * in, 5);
  const std::vector<float> dy = Random(static_cast<size_t>(batch) * out, 6);
  std::vector<float> dw(static_cast<size_t>(out) * in), db(out), db_body(out);
  LinearBackward(batch, in, out, x.data(), w.data(), dy.data(), dw.data(), db.data(), nullptr);
  ForEachIndex(out, [&](int64_t o) { gpu::BiasGradAt(o, batch, out, dy.data(), db_body.data()); });
  EXPECT_EQ(db_body, db);
}

// The loss fused into the output layer's backward gives what the CPU gets unfused: the loss'
// gradient, a width-1 LinearBackward, the ReLU mask of its input.
TEST(GpuBodies, TheFusedOutputLayerIsTheUnfusedCpuBits) {
  const int batch = 200, in = 24;
  const std::vector<float> logits = Random(batch, 20, 6.0f);
  std::vector<float> labels(batch);
  for (int b = 0; b < batch; ++b) labels[b] = b % 2 ? 1.0f : 0.0f;
  const std::vector<float> x = Random(static_cast<size_t>(batch) * in, 21);  // some <= 0
  const std::vector<float> w = Random(in, 22);
  std::vector<float> d_logits(batch), dw(in), db(1), dx(static_cast<size_t>(batch) * in);
  BceWithLogitsSum(batch, logits.data(), labels.data(), 1.0f / batch, d_logits.data(), nullptr);
  LinearBackward(batch, in, 1, x.data(), w.data(), d_logits.data(), dw.data(), db.data(),
                 dx.data());
  ReluBackwardInPlace(static_cast<int64_t>(dx.size()), x.data(), dx.data());
  std::vector<float> fused(dx.size(), -1.0f);
  ForEachIndex(static_cast<int64_t>(fused.size()), [&](int64_t i) {
    gpu::OutputLayerInputGradAt(i, in, logits.data(), labels.data(), 1.0f / batch, w.data(),
                                x.data(), true, fused.data());
  });
  EXPECT_EQ(fused, dx);
}

TEST(GpuBodies, RowGradientsAreAggregateRowGradsBits) {
  const TestStep s = MakeTestStep(gpu::testing::WideModel(), 200, 30, 8);
  const int T = s.model.num_sparse, dim = s.model.embedding_dim, vectors = T + 1;
  const StepInput in = s.Input();
  const std::vector<float> d_pooled = Random(static_cast<size_t>(s.batch) * T * dim, 9);
  std::vector<std::vector<float>> cpu(T);
  std::vector<float*> cpu_out;
  for (int t = 0; t < T; ++t) {
    cpu[t].resize(in.row_count[t] * dim);
    cpu_out.push_back(cpu[t].data());
  }
  AggregateRowGrads(in.index, in.row_count, d_pooled.data(), s.batch, T, dim, cpu_out);
  // The bodies read the pooled gradients where the interaction leaves them: vector t + 1 of
  // each sample's dz.
  std::vector<float> dz(static_cast<size_t>(s.batch) * vectors * dim, 0.0f);
  for (int b = 0; b < s.batch; ++b) {
    std::memcpy(dz.data() + (static_cast<size_t>(b) * vectors + 1) * dim,
                d_pooled.data() + static_cast<size_t>(b) * T * dim, sizeof(float) * T * dim);
  }
  gpu::RowUse use;
  ASSERT_EQ(gpu::MakeRowUse(in, T, 0, s.batch, &use), "");
  std::vector<float> body(use.row_offset.back() * dim);
  ForEachIndex(static_cast<int64_t>(body.size()), [&](int64_t i) {
    gpu::RowGradAt(i, vectors, dim, use.occ_offset.data(), use.occ_samples.data(),
                   use.row_table.data(), dz.data(), body.data());
  });
  for (int t = 0; t < T; ++t) {
    const std::vector<float> got(body.begin() + use.row_offset[t] * dim,
                                 body.begin() + use.row_offset[t + 1] * dim);
    EXPECT_EQ(got, cpu[t]) << "table " << t;
  }
}

TEST(GpuBodies, DenseOptimizersAreTheCpuKernelsBits) {
  const int64_t n = 1000;
  const std::vector<float> grad = Random(n, 10, 0.1f);
  for (DenseUpdateRule rule :
       {DenseUpdateRule::kSgd, DenseUpdateRule::kAdagrad, DenseUpdateRule::kAdam}) {
    DenseOptimizerConfig opt;
    opt.rule = rule;
    std::vector<float> w_cpu = Random(n, 11), w_body = w_cpu;
    std::vector<float> s_cpu(DenseStateFloats(opt, n), 0.0f), s_body = s_cpu;
    for (int64_t step = 1; step <= 3; ++step) {
      ApplyDenseUpdate(opt, step, n, grad.data(), w_cpu.data(), s_cpu.data());
      float c1 = 0, c2 = 0;
      gpu::AdamCorrections(opt.beta1, opt.beta2, step, &c1, &c2);
      ForEachIndex(n, [&](int64_t i) {
        switch (rule) {
          case DenseUpdateRule::kSgd:
            gpu::SgdAt(i, opt.lr, grad.data(), w_body.data());
            break;
          case DenseUpdateRule::kAdagrad:
            gpu::AdagradAt(i, opt.lr, opt.eps, grad.data(), w_body.data(), s_body.data());
            break;
          case DenseUpdateRule::kAdam:
            gpu::AdamAt(i, opt.lr, opt.beta1, opt.beta2, opt.eps, c1, c2, grad.data(),
                        w_body.data(), s_body.data(), s_body.data() + n);
            break;
        }
      });
    }
    EXPECT_EQ(w_body, w_cpu) << "rule " << static_cast<int>(rule);
    EXPECT_EQ(s_body, s_cpu) << "rule " << static_cast<int>(rule);
  }
}

// The whole step: the bodies' DenseMath within float rounding of the CPU worker's, on one
// thread and on two (the CPU slices the batch; the bodies do not).
TEST(GpuBodies, StepMatchesTheCpuDenseMath) {
  for (const DlrmConfig& m : {gpu::testing::SmallModel(), gpu::testing::WideModel()}) {
    for (int threads : {1, 2}) {
      const TestStep s = MakeTestStep(m, 256, 40, 12);
      auto model = Dlrm::Create(m, 256, threads);
      ASSERT_TRUE(model.ok()) << model.status();
      CpuDenseMath cpu(model->get());
      std::string error;
      auto bodies = gpu::CreateBodyDenseMath(m, 256, 1, &error);
      ASSERT_NE(bodies, nullptr) << error;
      TestOutput c(s), b(s);
      ASSERT_EQ(cpu.TrainStep(s.Input(), &c.out), "");
      ASSERT_EQ(bodies->TrainStep(s.Input(), &b.out), "");
      EXPECT_NEAR(b.out.loss, c.out.loss, 1e-6);
      EXPECT_LT(MaxRelativeError(b.probs, c.probs, 1e-6), 1e-5);
      for (size_t t = 0; t < c.dense.size(); ++t) {
        EXPECT_LT(MaxRelativeError(b.dense[t], c.dense[t], 1e-5), 1e-4)
            << "tensor " << t << ", " << threads << " thread(s)";
      }
      for (size_t t = 0; t < c.rows.size(); ++t) {
        EXPECT_LT(MaxRelativeError(b.rows[t], c.rows[t], 1e-5), 1e-4)
            << "table " << t << ", " << threads << " thread(s)";
      }
      std::vector<float> probs(s.batch);
      ASSERT_EQ(cpu.Predict(s.Input(), probs.data()), "");
      EXPECT_EQ(probs, c.probs);
    }
  }
}

// The worker's way to its GPUs: through the plugin when the build has one (then the machine's
// GPUs are counted, and asking for more is refused naming both numbers), otherwise a refusal
// that names where the plugin was looked for.
TEST(GpuPluginLoader, RefusesClearlyWhatTheMachineCannotDo) {
#ifdef ECPS_TEST_GPU_PLUGIN
  setenv("ECPS_GPU_PLUGIN", ECPS_TEST_GPU_PLUGIN, 1);
  auto math = CreateCudaDenseMath(gpu::testing::SmallModel(), 64, 99);
  ASSERT_FALSE(math.ok());
  EXPECT_EQ(math.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(math.status().message()),
              ::testing::HasSubstr("cluster.gpus_per_worker: 99, but this machine has"));
#else
  setenv("ECPS_GPU_PLUGIN", "/nonexistent/libecps_gpu.so", 1);
  auto math = CreateCudaDenseMath(gpu::testing::SmallModel(), 64, 1);
  ASSERT_FALSE(math.ok());
  EXPECT_THAT(std::string(math.status().message()),
              ::testing::HasSubstr("cannot load the GPU plugin libecps_gpu.so "
                                   "(/nonexistent/libecps_gpu.so: not there"));
#endif
}

}  // namespace
}  // namespace ecps
