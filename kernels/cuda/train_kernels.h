// The per-element bodies of the GPU worker's training kernels, as __host__ __device__
// functions of one index: a CUDA kernel calls one per thread (kernels/cuda/cuda_dlrm.cu), and
// the CPU runs the very same code in a loop over every index (ForEachIndex below), which is
// how the tests check them on a machine without a GPU. Plain C++17, no CUDA header needed.
//
// Layouts follow kernels/dense_ops.h (row-major, "batch" rows), and every sum adds in the
// order the CPU kernels add in, so where both round alike (the CUDA side is compiled with
// --fmad=false) the results are the same bits:
//   z         batch x vectors x dim    the interaction's input: [bottom output, pooled 0..T-1]
//   top_in    batch x top_stride       [bottom output, the pairwise dots]
//   rows      every unique row of every table, table after table (row_offset[t] = the first
//             of table t), dim floats each: what the worker pulled
//   index     batch x T                the sample's row in its table's unique rows
//   occ_*     per unique row (all tables, in rows order) the samples that use it, ascending:
//             occ_samples[occ_offset[u] .. occ_offset[u+1]); row_table[u] its table
#ifndef ECPS_KERNELS_CUDA_TRAIN_KERNELS_H_
#define ECPS_KERNELS_CUDA_TRAIN_KERNELS_H_

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/abft_bound.h"

#if defined(__CUDACC__)
#define ECPS_HD __host__ __device__ inline
#else
#define ECPS_HD inline
#endif

namespace ecps::gpu {

// Runs body(i) for i = 0..n-1 on the calling thread: the CPU form of a kernel launch.
template <typename Body>
void ForEachIndex(int64_t n, Body body) {
  for (int64_t i = 0; i < n; ++i) body(i);
}

// The pair p (0-based, in InteractionForward's order (1,0), (2,0), (2,1), (3,0), ...) as
// (r, c), c < r: r is the largest with r(r-1)/2 <= p.
ECPS_HD void PairOf(int p, int* r, int* c) {
  int row = static_cast<int>((1.0 + sqrt(1.0 + 8.0 * p)) / 2.0);
  while (row * (row - 1) / 2 > p) --row;
  while ((row + 1) * row / 2 <= p) ++row;
  *r = row;
  *c = p - row * (row - 1) / 2;
}

// --- Forward -----------------------------------------------------------------------------

// y[i] = max(y[i] + bias[i % out], 0) (relu) or y[i] + bias[i % out]: the epilogue of a GEMM
// that did not fuse it (i over batch * out).
ECPS_HD void BiasActivationAt(int64_t i, int out, const float* bias, bool relu, float* y) {
  const float v = y[i] + bias[i % out];
  y[i] = relu && !(v > 0.0f) ? 0.0f : v;
}

// Embedding-bag pooling fused into the interaction's input (i over batch * vectors * dim):
// vector 0 of sample b is the bottom MLP's output (also copied to top_in's first dim
// columns), vector v > 0 is the row sample b uses in table v - 1 (one id per feature, so the
// pooled row is the row).
ECPS_HD void GatherInteractionInputAt(int64_t i, int num_sparse, int dim, const float* bottom_out,
                                      const float* rows, const int64_t* row_offset,
                                      const int32_t* index, float* z, float* top_in,
                                      int top_stride) {
  const int vectors = num_sparse + 1;
  const int k = static_cast<int>(i % dim);
  const int v = static_cast<int>((i / dim) % vectors);
  const int64_t b = i / (static_cast<int64_t>(dim) * vectors);
  float value;
  if (v == 0) {
    value = bottom_out[b * dim + k];
    top_in[b * top_stride + k] = value;
  } else {
    const int t = v - 1;
    const int64_t row = row_offset[t] + index[b * num_sparse + t];
    value = rows[row * dim + k];
  }
  z[i] = value;
}

// One dot product of the interaction (i over batch * pairs): its products added in k order,
// as kernels/dense_ops.cc's InteractionForward.
ECPS_HD void InteractionForwardAt(int64_t i, int vectors, int dim, const float* z, float* out,
                                  int out_stride) {
  const int pairs = vectors * (vectors - 1) / 2;
  const int64_t b = i / pairs;
  int r, c;
  PairOf(static_cast<int>(i % pairs), &r, &c);
  const float* zr = z + (b * vectors + r) * dim;
  const float* zc = z + (b * vectors + c) * dim;
  float s = 0.0f;
  for (int k = 0; k < dim; ++k) s += zr[k] * zc[k];
  out[b * out_stride + i % pairs] = s;
}

// --- Loss --------------------------------------------------------------------------------

// Binary cross-entropy on logit b: loss[b] (summed by the caller, in double, in sample
// order), d_logits[b] = (sigmoid - label) * inv_batch, probs[b] = sigmoid when not null.
ECPS_HD void BceAt(int64_t b, const float* logits, const float* labels, float inv_batch,
                   float* loss, float* d_logits, float* probs) {
  const float z = logits[b], y = labels[b];
  loss[b] = (z > 0.0f ? z : 0.0f) - z * y + log1pf(expf(-fabsf(z)));
  const float p = z >= 0 ? 1.0f / (1.0f + expf(-z)) : expf(z) / (1.0f + expf(z));
  if (d_logits != nullptr) d_logits[b] = (p - y) * inv_batch;
  if (probs != nullptr) probs[b] = p;
}

// probs[b] = sigmoid(logits[b]) (inference).
ECPS_HD void SigmoidAt(int64_t b, const float* logits, float* probs) {
  const float z = logits[b];
  probs[b] = z >= 0 ? 1.0f / (1.0f + expf(-z)) : expf(z) / (1.0f + expf(z));
}

// --- Backward ----------------------------------------------------------------------------

// dy[i] = 0 where y[i] <= 0 (y is the ReLU's output).
ECPS_HD void ReluBackwardAt(int64_t i, const float* y, float* dy) {
  if (!(y[i] > 0.0f)) dy[i] = 0.0f;
}

// The loss fused into the output layer's backward (i over batch * in; the output layer has
// width 1, weights w): dx[b][k] = dlogit_b * w[k], dlogit_b recomputed from the logit as
// BceAt does, masked by the ReLU of the layer's input x when relu_input. The same bits as the
// unfused BceAt, a width-1 GEMM and ReluBackwardAt.
ECPS_HD void OutputLayerInputGradAt(int64_t i, int in, const float* logits, const float* labels,
                                    float inv_batch, const float* w, const float* x,
                                    bool relu_input, float* dx) {
  const int64_t b = i / in;
  const float z = logits[b];
  const float p = z >= 0 ? 1.0f / (1.0f + expf(-z)) : expf(z) / (1.0f + expf(z));
  const float g = ((p - labels[b]) * inv_batch) * w[i % in];
  dx[i] = relu_input && !(x[i] > 0.0f) ? 0.0f : g;
}

// db[o] = the sum over the batch of dy[b][o], in sample order (o over out).
ECPS_HD void BiasGradAt(int64_t o, int batch, int out, const float* dy, float* db) {
  float s = 0.0f;
  for (int b = 0; b < batch; ++b) s += dy[static_cast<int64_t>(b) * out + o];
  db[o] = s;
}

// The interaction's gradient of one element of z (i over batch * vectors * dim), from the
// dots' gradients d_out: vector v gets g(v, j) * z_j for j < v, then g(r, v) * z_r for r > v,
// the order in which InteractionBackward's pair loop reaches it. No atomics: each thread
// owns its element.
ECPS_HD void InteractionBackwardAt(int64_t i, int vectors, int dim, const float* z,
                                   const float* d_out, int d_out_stride, float* dz) {
  const int k = static_cast<int>(i % dim);
  const int v = static_cast<int>((i / dim) % vectors);
  const int64_t b = i / (static_cast<int64_t>(dim) * vectors);
  const float* zb = z + b * vectors * dim;
  const float* g = d_out + b * d_out_stride;
  float s = 0.0f;
  const int row = v * (v - 1) / 2;  // the first pair (v, 0)
  for (int j = 0; j < v; ++j) s += g[row + j] * zb[j * dim + k];
  for (int r = v + 1; r < vectors; ++r) s += g[r * (r - 1) / 2 + v] * zb[r * dim + k];
  dz[i] = s;
}

// The bottom MLP's output gradient (i over batch * dim): what reaches it through the
// interaction (dz's vector 0) plus what reaches it directly (d_top_in's first dim columns),
// masked by the bottom output's ReLU.
ECPS_HD void BottomOutputGradAt(int64_t i, int vectors, int dim, const float* dz,
                                const float* d_top_in, int top_stride, const float* bottom_out,
                                float* d_bottom) {
  const int k = static_cast<int>(i % dim);
  const int64_t b = i / dim;
  const float g = dz[b * vectors * dim + k] + d_top_in[b * top_stride + k];
  d_bottom[i] = bottom_out[i] > 0.0f ? g : 0.0f;
}

// The pooling's gradient for one element of one unique row (i over unique rows * dim): the
// sum of the gradients of the interaction inputs that used the row, in sample order (as
// kernels/pooling.cc's AggregateRowGrads). dz's vector t + 1 is table t's pooled gradient.
ECPS_HD void RowGradAt(int64_t i, int vectors, int dim, const int64_t* occ_offset,
                       const int32_t* occ_samples, const int32_t* row_table, const float* dz,
                       float* row_grads) {
  const int k = static_cast<int>(i % dim);
  const int64_t u = i / dim;
  const int v = row_table[u] + 1;
  float s = 0.0f;
  for (int64_t o = occ_offset[u]; o < occ_offset[u + 1]; ++o) {
    s += dz[(static_cast<int64_t>(occ_samples[o]) * vectors + v) * dim + k];
  }
  row_grads[i] = s;
}

// --- ABFT: the checksums of the MLP's GEMMs (docs/abft.md) ---------------------------------

// One GEMM to check: C (m x n) = op(A) (m x k) op(B) (k x n), row-major with leading
// dimensions, op transposing when ta / tb (kernels/abft.h's GemmCall; device pointers on the
// GPU). The linear layers' three products are the constructors below.
struct GemmOperands {
  bool ta = false, tb = false;
  int m = 0, n = 0, k = 0;
  const float* a = nullptr;
  int lda = 0;
  const float* b = nullptr;
  int ldb = 0;
  float* c = nullptr;
  int ldc = 0;
};

// y (batch x out) = x (batch x in) w^T, w out x in: the forward, before the bias and ReLU.
inline GemmOperands ForwardGemm(int batch, int in, int out, const float* x, const float* w,
                                float* y) {
  return {false, true, batch, out, in, x, in, w, in, y, out};
}
// dw (out x in) = dy^T (out x batch) x (batch x in): the weight gradient.
inline GemmOperands WeightGradGemm(int batch, int in, int out, const float* dy, const float* x,
                                   float* dw) {
  return {true, false, out, in, batch, dy, out, x, in, dw, in};
}
// dx (batch x in) = dy (batch x out) w (out x in): the input gradient.
inline GemmOperands InputGradGemm(int batch, int in, int out, const float* dy, const float* w,
                                  float* dx) {
  return {false, false, batch, in, out, dy, out, w, in, dx, in};
}

ECPS_HD float OpA(const GemmOperands& g, int r, int i) {
  return g.ta ? g.a[static_cast<int64_t>(i) * g.lda + r] : g.a[static_cast<int64_t>(r) * g.lda + i];
}
ECPS_HD float OpB(const GemmOperands& g, int i, int j) {
  return g.tb ? g.b[static_cast<int64_t>(j) * g.ldb + i] : g.b[static_cast<int64_t>(i) * g.ldb + j];
}

// The check runs these in order, each over its index range, all sums in double and in index
// order (so the GPU's and the CPU's runs give the same bits):
//   AbftSumRowsOfAAt   i < k   a_sum[i] = sum_r op(A)[r][i], a_sq[i] = sum_r op(A)[r][i]^2
//   AbftFrobeniusAt    one     *a_norm2 = ||A||_F^2 = sum_i a_sq[i]
//   AbftColumnSumsAt   j < n   c_sum[j] = sum_r C[r][j], ref[j] = sum_i a_sum[i] op(B)[i][j],
//                              b_norm2[j] = ||op(B)[:, j]||^2
//   AbftCompareColumnAt j < n  missed[j] = 1 when |c_sum[j] - ref[j]| exceeds the bound and
//                              an element of column j is outside its rounding bound, 2 when
//                              every element is within it (the miss cleared), else 0
//   AbftCountMissesAt  one     counts[0] += the columns missed, counts[1] += those cleared (a
//                              step's counts, across its GEMMs)
// One thread per column or per row of A: simple rather than fast (a GEMM's check reads A, B
// and C once more each; a missed column's confirmation, k multiply-adds per element of it, is
// paid only on a miss).
ECPS_HD void AbftSumRowsOfAAt(int64_t i, const GemmOperands& g, double* a_sum, double* a_sq) {
  double s = 0.0, q = 0.0;
  for (int r = 0; r < g.m; ++r) {
    const double v = OpA(g, r, static_cast<int>(i));
    s += v;
    q += v * v;
  }
  a_sum[i] = s;
  a_sq[i] = q;
}

ECPS_HD void AbftFrobeniusAt(int64_t, int k, const double* a_sq, double* a_norm2) {
  double s = 0.0;
  for (int i = 0; i < k; ++i) s += a_sq[i];
  *a_norm2 = s;
}

ECPS_HD void AbftColumnSumsAt(int64_t j, const GemmOperands& g, const double* a_sum, double* c_sum,
                              double* ref, double* b_norm2) {
  const int col = static_cast<int>(j);
  double c = 0.0;
  for (int r = 0; r < g.m; ++r) c += g.c[static_cast<int64_t>(r) * g.ldc + col];
  double s = 0.0, q = 0.0;
  for (int i = 0; i < g.k; ++i) {
    const double v = OpB(g, i, col);
    s += a_sum[i] * v;
    q += v * v;
  }
  c_sum[j] = c;
  ref[j] = s;
  b_norm2[j] = q;
}

// Whether every element of column `col` of C is within the deterministic rounding bound of
// its dot product (AbftElementBound), the dot product summed in double in index order. The
// column bound is probabilistic: rounding errors that correlate (repeated values, repeated
// rows) can add up past it on a clean GEMM, and pass this; a flipped element does not.
ECPS_HD bool AbftColumnWithinRounding(const GemmOperands& g, int col) {
  const float* b = g.tb ? g.b + static_cast<int64_t>(col) * g.ldb : g.b + col;
  for (int r = 0; r < g.m; ++r) {
    const float* a = g.ta ? g.a + r : g.a + static_cast<int64_t>(r) * g.lda;
    if (!ecps::AbftElementWithinRounding(g.c[static_cast<int64_t>(r) * g.ldc + col], g.k, a,
                                         g.ta ? g.lda : 1, b, g.tb ? 1 : g.ldb)) {
      return false;
    }
  }
  return true;
}

// The bound is ColumnBound's (kernels/abft_bound.h) for p = m rows: `lambda` is kAbftLambda.
// A NaN or an infinity misses. A miss is confirmed by the column's elements before it counts
// (kernels/abft.h ConfirmMiss on the CPU; here without its second run, since the elements
// against their own bound decide alone: the second run only settles a struck run sooner).
ECPS_HD void AbftCompareColumnAt(int64_t j, const GemmOperands& g, double lambda,
                                 const double* c_sum, const double* ref, const double* a_norm2,
                                 const double* b_norm2, int* missed) {
  const double diff = fabs(c_sum[j] - ref[j]);
  const double bound = ecps::AbftColumnBound(lambda, g.m, g.k, sqrt(*a_norm2), sqrt(b_norm2[j]));
  if (diff <= bound) {
    missed[j] = 0;
  } else {
    missed[j] = AbftColumnWithinRounding(g, static_cast<int>(j)) ? 2 : 1;
  }
}

ECPS_HD void AbftCountMissesAt(int64_t, int n, const int* missed, int* counts) {
  int misses = 0, cleared = 0;
  for (int j = 0; j < n; ++j) {
    misses += missed[j] == 1 ? 1 : 0;
    cleared += missed[j] == 2 ? 1 : 0;
  }
  counts[0] += misses;
  counts[1] += cleared;
}

// Flips `bit` of c[element]: the tests' fault seam (kernels/abft.h's GemmFault::kOutput).
ECPS_HD void FlipBitAt(int64_t, float* c, int64_t element, int bit) {
  uint32_t u;
  memcpy(&u, c + element, sizeof(u));
  u ^= uint32_t{1} << (bit & 31);
  memcpy(c + element, &u, sizeof(u));
}

// --- Dense optimizers (kernels/optimizers.h's rules, element by element) ------------------

ECPS_HD void SgdAt(int64_t i, float lr, const float* grad, float* w) { w[i] -= lr * grad[i]; }

ECPS_HD void AdagradAt(int64_t i, float lr, float eps, const float* grad, float* w, float* acc) {
  acc[i] += grad[i] * grad[i];
  w[i] -= lr * grad[i] / (sqrtf(acc[i]) + eps);
}

// c1 = 1 / (1 - beta1^t), c2 = 1 / (1 - beta2^t): the bias corrections of step t, computed
// once per step on the host (AdamCorrections).
ECPS_HD void AdamAt(int64_t i, float lr, float beta1, float beta2, float eps, float c1, float c2,
                    const float* grad, float* w, float* m, float* v) {
  const float g = grad[i];
  m[i] = beta1 * m[i] + (1.0f - beta1) * g;
  v[i] = beta2 * v[i] + (1.0f - beta2) * g * g;
  w[i] -= lr * (m[i] * c1) / (sqrtf(v[i] * c2) + eps);
}

inline void AdamCorrections(float beta1, float beta2, int64_t step, float* c1, float* c2) {
  const double t = static_cast<double>(step < 1 ? 1 : step);
  *c1 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(beta1), t)));
  *c2 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(beta2), t)));
}

}  // namespace ecps::gpu

#endif  // ECPS_KERNELS_CUDA_TRAIN_KERNELS_H_
