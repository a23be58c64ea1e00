#include "kernels/optimizers.h"

#include <cmath>

#include "kernels/cpu_dispatch.h"
#include "kernels/hash_rng.h"

namespace ecps {
namespace {

inline void SparseUpdate(const SparseOptimizerConfig& opt, int dim, const float* g, float* p) {
  const float lr = opt.lr, eps = opt.eps;
  switch (opt.rule) {
    case SparseUpdateRule::kSgd:
      for (int k = 0; k < dim; ++k) p[k] -= lr * g[k];
      break;
    case SparseUpdateRule::kAdagrad: {
      float* acc = p + dim;
      for (int k = 0; k < dim; ++k) {
        acc[k] += g[k] * g[k];
        p[k] -= lr * g[k] / (std::sqrt(acc[k]) + eps);
      }
      break;
    }
    case SparseUpdateRule::kRowwiseAdagrad: {
      float sq = 0;
      for (int k = 0; k < dim; ++k) sq += g[k] * g[k];
      float& acc = p[dim];
      acc += sq / static_cast<float>(dim);
      const float scale = lr / (std::sqrt(acc) + eps);
      for (int k = 0; k < dim; ++k) p[k] -= scale * g[k];
      break;
    }
  }
}

}  // namespace

absl::Status ValidateSparseOptimizer(const SparseOptimizerConfig& opt) {
  if (!(opt.lr > 0)) return absl::InvalidArgumentError("optimizer.sparse.lr must be > 0");
  if (!(opt.eps > 0)) return absl::InvalidArgumentError("optimizer.sparse.eps must be > 0");
  if (!(opt.initial_accumulator >= 0)) {
    return absl::InvalidArgumentError("optimizer.sparse.initial_accumulator must be >= 0");
  }
  return absl::OkStatus();
}

absl::Status ValidateDenseOptimizer(const DenseOptimizerConfig& opt) {
  if (!(opt.lr > 0)) return absl::InvalidArgumentError("optimizer.dense.lr must be > 0");
  if (!(opt.eps > 0)) return absl::InvalidArgumentError("optimizer.dense.eps must be > 0");
  if (!(opt.beta1 >= 0 && opt.beta1 < 1) || !(opt.beta2 >= 0 && opt.beta2 < 1)) {
    return absl::InvalidArgumentError("optimizer.dense.beta1/beta2 must be in [0, 1)");
  }
  return absl::OkStatus();
}

int SparseStateFloats(const SparseOptimizerConfig& opt, int dim) {
  switch (opt.rule) {
    case SparseUpdateRule::kAdagrad:
      return dim;
    case SparseUpdateRule::kRowwiseAdagrad:
      return 1;
    default:
      return 0;
  }
}

void ApplySparseUpdate(const SparseOptimizerConfig& opt, int dim, const float* grad,
                       float* payload) {
  SparseUpdate(opt, dim, grad, payload);
}

ECPS_CLONES void ApplySparseUpdates(const SparseOptimizerConfig& opt, int dim, int64_t n,
                                    const float* grads, float* const* payloads) {
  for (int64_t i = 0; i < n; ++i) SparseUpdate(opt, dim, grads + i * dim, payloads[i]);
}

void InitSparseRow(const SparseOptimizerConfig& opt, uint64_t seed, int table, int64_t row, int dim,
                   int64_t table_rows, float* payload) {
  const float bound = std::sqrt(1.0f / static_cast<float>(table_rows > 0 ? table_rows : 1));
  const uint64_t base =
      HashOf(seed, 0x5EED0001ull, static_cast<uint64_t>(table), static_cast<uint64_t>(row));
  for (int k = 0; k < dim; ++k) {
    const float u = UnitFloat(Mix64(base + static_cast<uint64_t>(k)));
    payload[k] = (2.0f * u - 1.0f) * bound;
  }
  const int state = SparseStateFloats(opt, dim);
  for (int k = 0; k < state; ++k) payload[dim + k] = opt.initial_accumulator;
}

int64_t DenseStateFloats(const DenseOptimizerConfig& opt, int64_t size) {
  switch (opt.rule) {
    case DenseUpdateRule::kAdagrad:
      return size;
    case DenseUpdateRule::kAdam:
      return 2 * size;
    default:
      return 0;
  }
}

ECPS_CLONES void ApplyDenseUpdate(const DenseOptimizerConfig& opt, int64_t step, int64_t size,
                                  const float* grad, float* weights, float* state) {
  const float lr = opt.lr, eps = opt.eps;
  switch (opt.rule) {
    case DenseUpdateRule::kSgd:
      for (int64_t i = 0; i < size; ++i) weights[i] -= lr * grad[i];
      break;
    case DenseUpdateRule::kAdagrad:
      for (int64_t i = 0; i < size; ++i) {
        state[i] += grad[i] * grad[i];
        weights[i] -= lr * grad[i] / (std::sqrt(state[i]) + eps);
      }
      break;
    case DenseUpdateRule::kAdam: {
      const float b1 = opt.beta1, b2 = opt.beta2;
      const double t = static_cast<double>(step < 1 ? 1 : step);
      const float c1 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(b1), t)));
      const float c2 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(b2), t)));
      float* m = state;
      float* v = state + size;
      for (int64_t i = 0; i < size; ++i) {
        const float g = grad[i];
        m[i] = b1 * m[i] + (1.0f - b1) * g;
        v[i] = b2 * v[i] + (1.0f - b2) * g * g;
        weights[i] -= lr * (m[i] * c1) / (std::sqrt(v[i] * c2) + eps);
      }
      break;
    }
  }
}

}  // namespace ecps
