// A deterministic random step for the dense-math tests: a model, a batch, its unique rows
// and dense parameters, and output buffers shaped for them. Header-only, plain C++ (the
// GPU-only build's tests use it too).
#ifndef ECPS_KERNELS_CUDA_TEST_BATCH_H_
#define ECPS_KERNELS_CUDA_TEST_BATCH_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/body_dense_math.h"
#include "kernels/dense_math.h"

namespace ecps::gpu::testing {

inline DlrmConfig SmallModel() {
  DlrmConfig m;
  m.num_dense = 5;
  m.num_sparse = 3;
  m.embedding_dim = 4;
  m.bottom_mlp = {8, 4};
  m.top_mlp = {6};
  return m;
}

// ECRec's compute-heavy shape, narrowed to test sizes (dim 16, not 128).
inline DlrmConfig WideModel() {
  DlrmConfig m;
  m.num_dense = 13;
  m.num_sparse = 8;
  m.embedding_dim = 16;
  m.bottom_mlp = {64, 32, 16};
  m.top_mlp = {64, 32};
  return m;
}

struct TestStep {
  DlrmConfig model;
  int batch = 0;
  std::vector<float> dense_x, labels;
  std::vector<int32_t> index;
  std::vector<std::vector<float>> rows, params;

  StepInput Input() const {
    StepInput in;
    in.batch = batch;
    in.dense_x = dense_x.data();
    in.labels = labels.data();
    in.index = index.data();
    for (const auto& r : rows) {
      in.rows.push_back(r.data());
      in.row_count.push_back(static_cast<int64_t>(r.size()) / model.embedding_dim);
    }
    for (const auto& p : params) in.params.push_back(p.data());
    return in;
  }
};

// Rows are shared by several samples (rows_per_table < batch), so the row gradients sum.
inline TestStep MakeTestStep(const DlrmConfig& model, int batch, int rows_per_table,
                             uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  TestStep s;
  s.model = model;
  s.batch = batch;
  s.dense_x.resize(static_cast<size_t>(batch) * model.num_dense);
  for (float& x : s.dense_x) x = u(rng);
  s.labels.resize(batch);
  for (float& y : s.labels) y = rng() % 2 ? 1.0f : 0.0f;
  const int rows = std::min(rows_per_table, batch);
  s.index.resize(static_cast<size_t>(batch) * model.num_sparse);
  for (int b = 0; b < batch; ++b) {
    for (int t = 0; t < model.num_sparse; ++t) {
      // Every row used at least once: the first `rows` samples take rows 0..rows-1.
      s.index[static_cast<size_t>(b) * model.num_sparse + t] =
          b < rows ? b : static_cast<int32_t>(rng() % rows);
    }
  }
  s.rows.assign(model.num_sparse,
                std::vector<float>(static_cast<size_t>(rows) * model.embedding_dim));
  for (auto& r : s.rows) {
    for (float& x : r) x = 0.5f * u(rng);
  }
  for (int64_t size : DenseTensorSizes(model)) {
    std::vector<float> p(size);
    for (float& x : p) x = 0.4f * u(rng);
    s.params.push_back(std::move(p));
  }
  return s;
}

// Output buffers for a step.
struct TestOutput {
  std::vector<std::vector<float>> dense, rows;
  std::vector<float> probs;
  StepOutput out;

  explicit TestOutput(const TestStep& s) {
    for (const auto& p : s.params) dense.emplace_back(p.size(), -7.0f);
    for (const auto& r : s.rows) rows.emplace_back(r.size(), -7.0f);
    probs.assign(s.batch, -7.0f);
    for (auto& d : dense) out.dense_grads.push_back(d.data());
    for (auto& r : rows) out.row_grads.push_back(r.data());
    out.probs = probs.data();
  }
};

// The largest |a - b| / (|b| + floor) over two buffers.
inline double MaxRelativeError(const std::vector<float>& a, const std::vector<float>& b,
                               double floor) {
  double worst = a.size() == b.size() ? 0.0 : INFINITY;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    worst =
        std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]) / (std::fabs(b[i]) + floor));
  }
  return worst;
}

// The CPU run of the bodies, or null (and *error) for a bad shape.
inline std::unique_ptr<DenseMath> Bodies(const DlrmConfig& m, int batch, int slices = 1,
                                         std::string* error = nullptr) {
  std::string ignored;
  return CreateBodyDenseMath(m, batch, slices, error != nullptr ? error : &ignored);
}

}  // namespace ecps::gpu::testing

#endif  // ECPS_KERNELS_CUDA_TEST_BATCH_H_
