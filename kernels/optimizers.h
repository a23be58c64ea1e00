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
#include "runtime/spec.h"

namespace ecps {

// INVALID_ARGUMENT naming the field when the type is unknown or a rate/eps is not positive.
absl::Status ValidateSparseOptimizer(const SparseOptimizer& opt);
absl::Status ValidateDenseOptimizer(const DenseOptimizer& opt);

// A sparse row's payload = dim weights followed by SparseStateFloats() optimizer-state floats.
int SparseStateFloats(const SparseOptimizer& opt,
                      int dim);  // sgd 0, adagrad dim, rowwise_adagrad 1

// Applies one update to a row payload in place; grad has dim floats (already summed over the
// batch's occurrences). An unknown type leaves the payload unchanged (validate first).
void ApplySparseUpdate(const SparseOptimizer& opt, int dim, const float* grad, float* payload);

// Same as ApplySparseUpdate for n rows: row i's gradient is grads + i*dim and its payload is
// payloads[i]. Resolves the optimizer type once.
void ApplySparseUpdates(const SparseOptimizer& opt, int dim, int64_t n, const float* grads,
                        float* const* payloads);

// Deterministic initial payload of (table, row): depends only on (seed, table, row, dim,
// table_rows), never on which server holds it. Weights ~ U(-sqrt(1/table_rows),
// +sqrt(1/table_rows)) from a counter-based hash; state = initial_accumulator.
void InitSparseRow(const SparseOptimizer& opt, uint64_t seed, int table, int64_t row, int dim,
                   int64_t table_rows, float* payload);

int64_t DenseStateFloats(const DenseOptimizer& opt,
                         int64_t size);  // sgd 0, adagrad size, adam 2*size

// step is the 1-based count of updates applied to this tensor (Adam bias correction).
// state holds DenseStateFloats() floats (adam: m[size] then v[size]), zero-initialised.
void ApplyDenseUpdate(const DenseOptimizer& opt, int64_t step, int64_t size, const float* grad,
                      float* weights, float* state);

}  // namespace ecps

#endif  // ECPS_KERNELS_OPTIMIZERS_H_
