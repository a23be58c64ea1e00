// Sparse (embedding row) and dense (MLP tensor) optimizer updates, shared by the parameter
// servers, the worker and the in-process reference trainer so that all compute bit-identical
// results. All functions are pure and thread-compatible.
//
// Update rules (g: gradient, w: weight, lr/eps/betas from the spec):
//   sgd:             w -= lr * g
//   adagrad:         a += g*g;                 w -= lr * g / (sqrt(a) + eps)      (per element)
//   rowwise_adagrad: a += mean_k(g_k^2);       w -= lr * g / (sqrt(a) + eps)      (one a per row)
//   adam (dense):    m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g*g;
//                    w -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps),  t = step (1-based)
#ifndef ECPS_KERNELS_OPTIMIZERS_H_
#define ECPS_KERNELS_OPTIMIZERS_H_

#include <cstdint>

#include "absl/status/status.h"

namespace ecps {

enum class SparseUpdateRule { kSgd, kAdagrad, kRowwiseAdagrad };
enum class DenseUpdateRule { kSgd, kAdagrad, kAdam };

// What the kernels need of an optimizer. A job's come from its spec's optimizer section
// (domain/spec_config.h converts); the defaults here serve configs built by hand.
struct SparseOptimizerConfig {
  SparseUpdateRule rule = SparseUpdateRule::kAdagrad;
  float lr = 0.05f;
  float eps = 1e-8f;
  float initial_accumulator = 0.0f;
};

struct DenseOptimizerConfig {
  DenseUpdateRule rule = DenseUpdateRule::kAdam;
  float lr = 0.001f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
};

// INVALID_ARGUMENT naming the spec field when a rate/eps is not positive or a beta is not in
// [0, 1).
absl::Status ValidateSparseOptimizer(const SparseOptimizerConfig& opt);
absl::Status ValidateDenseOptimizer(const DenseOptimizerConfig& opt);

// A sparse row's payload = dim weights followed by SparseStateFloats() optimizer-state floats.
int SparseStateFloats(const SparseOptimizerConfig& opt,
                      int dim);  // sgd 0, adagrad dim, rowwise_adagrad 1

// Applies one update to a row payload in place; grad has dim floats (already summed over the
// batch's occurrences).
void ApplySparseUpdate(const SparseOptimizerConfig& opt, int dim, const float* grad,
                       float* payload);

// Same as ApplySparseUpdate for n rows: row i's gradient is grads + i*dim and its payload is
// payloads[i].
void ApplySparseUpdates(const SparseOptimizerConfig& opt, int dim, int64_t n, const float* grads,
                        float* const* payloads);

// Deterministic initial payload of (table, row): depends only on (seed, table, row, dim,
// table_rows), never on which server holds it. Weights ~ U(-sqrt(1/table_rows),
// +sqrt(1/table_rows)) from a counter-based hash; state = initial_accumulator.
void InitSparseRow(const SparseOptimizerConfig& opt, uint64_t seed, int table, int64_t row, int dim,
                   int64_t table_rows, float* payload);

int64_t DenseStateFloats(const DenseOptimizerConfig& opt,
                         int64_t size);  // sgd 0, adagrad size, adam 2*size

// step is the 1-based count of updates applied to this tensor (Adam bias correction).
// state holds DenseStateFloats() floats (adam: m[size] then v[size]), zero-initialised.
void ApplyDenseUpdate(const DenseOptimizerConfig& opt, int64_t step, int64_t size,
                      const float* grad, float* weights, float* state);

}  // namespace ecps

#endif  // ECPS_KERNELS_OPTIMIZERS_H_
