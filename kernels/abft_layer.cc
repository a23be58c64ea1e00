#include "kernels/abft_layer.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu_dispatch.h"
#include "kernels/dense_ops.h"

namespace ecps {
namespace {

// Eight doubles as one value (GCC's and Clang's vector extension), for the sums that run
// along a row: the vectoriser does not reorder a floating-point reduction by itself. Each
// clone lowers it to its widest registers. The order of these sums does not matter to the
// check (the bound covers any order); the outputs the layer returns never go through them.
using V8d = double __attribute__((vector_size(64)));
using V8f = float __attribute__((vector_size(32)));
using V16f = float __attribute__((vector_size(64)));
using V16d = double __attribute__((vector_size(128)));

// Pointers and references only: a vector passed or returned by value would change the ABI
// between the clones (-Wpsabi).
inline void Load8(const float* p, V8d* v) {
  V8f f;
  std::memcpy(&f, p, sizeof(f));
  *v = __builtin_convertvector(f, V8d);
}
inline void AddTo8(double* p, const V8d& v) {
  V8d d;
  std::memcpy(&d, p, sizeof(d));
  d += v;
  std::memcpy(p, &d, sizeof(d));
}
// p[0..16) += v, converted to double.
inline void AddTo16(double* p, const V16f& v) {
  V16d d;
  std::memcpy(&d, p, sizeof(d));
  d += __builtin_convertvector(v, V16d);
  std::memcpy(p, &d, sizeof(d));
}
inline void Load8(const double* p, V8d* v) { std::memcpy(v, p, sizeof(*v)); }
inline double Sum8(const V8d& v) {
  return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
}

// The passes below take rows kBlock at a time, so that the running sums they keep per column
// are loaded and stored once per block instead of once per row (the L1 traffic of those sums,
// not the arithmetic, is what limits a pass over a narrow matrix).
constexpr int kBlock = 4;
#define ECPS_ALWAYS_INLINE inline __attribute__((always_inline))

// Rows rows[0..R) (cols each): col += their sum, row_sums[i] = row i's sum, q[i] += its squares.
template <int R>
ECPS_ALWAYS_INLINE void SumsOfXRows(const float* const* rows, int cols, double* col,
                                    double* row_sums, V8d* q, double* q_tail) {
  V8d s[R] = {};
  int j = 0;
  for (; j + 8 <= cols; j += 8) {
    V8d sum = {};
    for (int i = 0; i < R; ++i) {
      V8d v;
      Load8(rows[i] + j, &v);
      s[i] += v, q[i] += v * v, sum += v;
    }
    AddTo8(col + j, sum);
  }
  for (int i = 0; i < R; ++i) row_sums[i] = Sum8(s[i]);
  for (; j < cols; ++j) {
    double sum = 0;
    for (int i = 0; i < R; ++i) {
      const double v = rows[i][j];
      row_sums[i] += v, *q_tail += v * v, sum += v;
    }
    col[j] += sum;
  }
}

// col[j] = sum over rows of x[r][j], row_sums[r] = sum of row r; returns ||x||_F^2.
ECPS_CLONES double SumsOfX(int rows, int cols, const float* __restrict x, double* __restrict col,
                           double* __restrict row_sums) {
  std::fill(col, col + cols, 0.0);
  V8d q[kBlock] = {};
  double q_tail = 0;
  int r = 0;
  for (; r + kBlock <= rows; r += kBlock) {
    const float* block[kBlock];
    for (int i = 0; i < kBlock; ++i) block[i] = x + static_cast<int64_t>(r + i) * cols;
    SumsOfXRows<kBlock>(block, cols, col, row_sums + r, q, &q_tail);
  }
  for (; r < rows; ++r) {
    const float* one = x + static_cast<int64_t>(r) * cols;
    SumsOfXRows<1>(&one, cols, col, row_sums + r, q, &q_tail);
  }
  const V8d q_all = (q[0] + q[1]) + (q[2] + q[3]);
  return Sum8(q_all) + q_tail;
}

// *sum = rows[0][j..] + ... + rows[R - 1][j..], in float (V: V8f or V16f), in row order.
template <typename V, int R>
ECPS_ALWAYS_INLINE void SumOfBlock(const float* const* rows, int j, V* sum) {
  std::memcpy(sum, rows[0] + j, sizeof(V));
  for (int i = 1; i < R; ++i) {
    V v;
    std::memcpy(&v, rows[i] + j, sizeof(v));
    *sum += v;
  }
}
// col += the sum of rows[0..R) (cols each). A block's R values of a column are summed in float,
// in row order, and only their sum is converted and added in double: one conversion and one
// double add per R elements instead of per element. The float sums' rounding is a term of the
// bound (ColumnBound: the 2k + 12 under its square root).
template <int R>
ECPS_ALWAYS_INLINE void AddRows(const float* const* rows, int cols, double* col) {
  int j = 0;
  for (; j + 16 <= cols; j += 16) {
    V16f sum;
    SumOfBlock<V16f, R>(rows, j, &sum);
    AddTo16(col + j, sum);
  }
  for (; j + 8 <= cols; j += 8) {
    V8f sum;
    SumOfBlock<V8f, R>(rows, j, &sum);
    AddTo8(col + j, __builtin_convertvector(sum, V8d));
  }
  for (; j < cols; ++j) {
    float sum = rows[0][j];
    for (int i = 1; i < R; ++i) sum += rows[i][j];
    col[j] += sum;
  }
}

// For w (out x in): ref[o] = x_col . w[o], row_norm2[o] = ||w[o]||^2, col_norm2[j] =
// ||w[:, j]||^2.
ECPS_CLONES void SumsOfW(int out, int in, const float* __restrict w,
                         const double* __restrict x_col, double* __restrict ref,
                         double* __restrict row_norm2, double* __restrict col_norm2) {
  std::fill(col_norm2, col_norm2 + in, 0.0);
  for (int o = 0; o < out; ++o) {
    const float* row = w + static_cast<int64_t>(o) * in;
    V8d d0 = {}, d1 = {}, q0 = {}, q1 = {};
    int j = 0;
    for (; j + 16 <= in; j += 16) {
      V8d v0, v1, c0, c1;
      Load8(row + j, &v0), Load8(row + j + 8, &v1);
      Load8(x_col + j, &c0), Load8(x_col + j + 8, &c1);
      d0 += v0 * c0, d1 += v1 * c1;
      const V8d s0 = v0 * v0, s1 = v1 * v1;
      q0 += s0, q1 += s1;
      AddTo8(col_norm2 + j, s0), AddTo8(col_norm2 + j + 8, s1);
    }
    const V8d d01 = d0 + d1, q01 = q0 + q1;
    double d = Sum8(d01), q = Sum8(q01);
    for (; j < in; ++j) {
      const double v = row[j];
      d += v * x_col[j], q += v * v, col_norm2[j] += v * v;
    }
    ref[o] = d;
    row_norm2[o] = q;
  }
}

// Points block[0..n) at rows r, r + 1, ... of m (cols wide), n = min(kBlock, rows - r);
// returns n.
ECPS_ALWAYS_INLINE int RowBlock(const float* m, int cols, int r, int rows, const float** block) {
  const int n = std::min(kBlock, rows - r);
  for (int i = 0; i < n; ++i) block[i] = m + static_cast<int64_t>(r + i) * cols;
  return n;
}

// col += the sum of the n rows of block: kBlock at once, a short block row by row.
ECPS_ALWAYS_INLINE void AddBlock(const float* const* block, int n, int cols, double* col) {
  if (n == kBlock) {
    AddRows<kBlock>(block, cols, col);
  } else {
    for (int i = 0; i < n; ++i) AddRows<1>(block + i, cols, col);
  }
}

// The bias and ReLU epilogue (dense_ops.h BiasActivation, a block of rows at a time), with
// the column sums of the GEMM's output taken from the rows it is about to read. With
// next_col, the sums of what it wrote too (the next layer's input): next_col its column sums,
// next_rows its row sums; returns the sum of its squares (0 without).
ECPS_CLONES double EpilogueWithSums(int batch, int out, const float* __restrict bias, bool relu,
                                    float* __restrict y, double* __restrict col,
                                    double* __restrict next_col, double* __restrict next_rows) {
  std::fill(col, col + out, 0.0);
  if (next_col != nullptr) std::fill(next_col, next_col + out, 0.0);
  V8d q[kBlock] = {};
  double q_tail = 0;
  for (int b = 0; b < batch; b += kBlock) {
    const float* block[kBlock];
    const int n = RowBlock(y, out, b, batch, block);
    AddBlock(block, n, out, col);
    BiasActivation(n, out, bias, relu, y + static_cast<int64_t>(b) * out);
    if (next_col == nullptr) continue;
    if (n == kBlock) {
      SumsOfXRows<kBlock>(block, out, next_col, next_rows + b, q, &q_tail);
    } else {
      for (int i = 0; i < n; ++i) SumsOfXRows<1>(block + i, out, next_col, next_rows + b + i, q, &q_tail);
    }
  }
  const V8d q_all = (q[0] + q[1]) + (q[2] + q[3]);
  return Sum8(q_all) + q_tail;
}

// Rows rows[0..R) of dy: col += their sum, norm2 += their squares, ref += x_rows[i] times row i.
template <int R>
ECPS_ALWAYS_INLINE void SumsOfDyRows(const float* const* rows, const double* x_rows, int out,
                                     double* col, double* norm2, double* ref) {
  int o = 0;
  for (; o + 8 <= out; o += 8) {
    V8d c = {}, q = {}, f = {};
    for (int i = 0; i < R; ++i) {
      V8d v;
      Load8(rows[i] + o, &v);
      c += v, q += v * v, f += x_rows[i] * v;
    }
    AddTo8(col + o, c), AddTo8(norm2 + o, q), AddTo8(ref + o, f);
  }
  for (; o < out; ++o) {
    for (int i = 0; i < R; ++i) {
      const double v = rows[i][o];
      col[o] += v, norm2[o] += v * v, ref[o] += x_rows[i] * v;
    }
  }
}

// One pass over dy (batch x out): db as dense_ops.cc sums it (float, over b in order), and in
// double its column sums, its columns' squared norms and ref[o] = sum_b x_rows[b] dy[b][o].
ECPS_CLONES void SumsOfDy(int batch, int out, const float* __restrict dy,
                          const double* __restrict x_rows, float* __restrict db,
                          double* __restrict col, double* __restrict norm2,
                          double* __restrict ref) {
  std::fill(db, db + out, 0.0f);
  std::fill(col, col + out, 0.0);
  std::fill(norm2, norm2 + out, 0.0);
  std::fill(ref, ref + out, 0.0);
  for (int b = 0; b < batch; b += kBlock) {
    const float* block[kBlock];
    const int n = RowBlock(dy, out, b, batch, block);
    if (n == kBlock) {
      // The same adds in the same order as row by row; one pass over db.
      const float* __restrict r0 = block[0];
      const float* __restrict r1 = block[1];
      const float* __restrict r2 = block[2];
      const float* __restrict r3 = block[3];
      for (int o = 0; o < out; ++o) db[o] = (((db[o] + r0[o]) + r1[o]) + r2[o]) + r3[o];
      SumsOfDyRows<kBlock>(block, x_rows + b, out, col, norm2, ref);
    } else {
      for (int i = 0; i < n; ++i) {
        const float* __restrict row = block[i];
        for (int o = 0; o < out; ++o) db[o] += row[o];
        SumsOfDyRows<1>(block + i, x_rows + b + i, out, col, norm2, ref);
      }
    }
  }
}

// dw_rows[o] = sum of dw's row o; with ref_dx, ref_dx[j] = sum_o dy_col[o] w[o][j].
ECPS_CLONES void SumsOfDwAndW(int out, int in, const float* __restrict dw,
                              const float* __restrict w, const double* __restrict dy_col,
                              double* __restrict dw_rows, double* __restrict ref_dx) {
  if (ref_dx != nullptr) std::fill(ref_dx, ref_dx + in, 0.0);
  for (int o = 0; o < out; ++o) {
    const float* row = dw + static_cast<int64_t>(o) * in;
    V8d s0 = {}, s1 = {};
    int j = 0;
    for (; j + 16 <= in; j += 16) {
      V8d v0, v1;
      Load8(row + j, &v0), Load8(row + j + 8, &v1);
      s0 += v0, s1 += v1;
    }
    const V8d s01 = s0 + s1;
    double s = Sum8(s01);
    for (; j < in; ++j) s += row[j];
    dw_rows[o] = s;
    if (ref_dx == nullptr) continue;
    const float* wr = w + static_cast<int64_t>(o) * in;
    const double c = dy_col[o];
    for (int i = 0; i < in; ++i) ref_dx[i] += c * wr[i];
  }
}

// col[j] = sum over the rows of c (rows x cols); then, with a mask, ReluBackwardInPlace on each
// block of rows right after it is summed.
ECPS_CLONES void ColumnSums(int rows, int cols, float* __restrict c,
                            const float* __restrict mask, double* __restrict col) {
  std::fill(col, col + cols, 0.0);
  for (int r = 0; r < rows; r += kBlock) {
    const float* block[kBlock];
    const int n = RowBlock(c, cols, r, rows, block);
    AddBlock(block, n, cols, col);
    if (mask == nullptr) continue;
    const int64_t begin = static_cast<int64_t>(r) * cols;
    ReluBackwardInPlace(int64_t{n} * cols, mask + begin, c + begin);
  }
}

// *missed = the sums (of n) that miss their reference by more than ColumnBound(p, k, ||A||_F,
// ||B_:j||); NaN and infinity miss. Raises *margin to the largest |difference| / bound.
void Misses(int n, const double* got, const double* ref, int p, int k, double a_frobenius2,
            const double* b_norm2, double* margin, std::vector<int>* missed) {
  const double a_frobenius = std::sqrt(a_frobenius2);
  missed->clear();
  for (int j = 0; j < n; ++j) {
    const double diff = std::fabs(got[j] - ref[j]);
    const double bound = ColumnBound(p, k, a_frobenius, std::sqrt(b_norm2[j]));
    if (!(diff <= bound)) missed->push_back(j);
    if (std::isfinite(diff)) *margin = std::max(*margin, diff / bound);
  }
}

// The missed columns (rows, when by_rows) of product g (site `site`) counted in *abft.misses
// when ConfirmMiss stands by them, in *abft.cleared when it clears them.
void Settle(const GemmCall& g, int site, const LinearAbft& abft, const std::vector<int>& missed,
            bool by_rows, const GemmFinish& finish) {
  if (missed.empty()) return;
  const int n = static_cast<int>(missed.size());
  if (ConfirmMiss(g, 0, g.m, site, abft.injector, missed, by_rows, finish)) {
    *abft.misses += n;
  } else if (abft.cleared != nullptr) {
    *abft.cleared += n;
  }
}

}  // namespace

bool UsesLayerChecksums(const LinearAbft& abft) {
  return abft.sums != nullptr && abft.forward == AbftScheme::kGlobal &&
         abft.weight_grad == AbftScheme::kGlobal &&
         (abft.input_grad == AbftScheme::kGlobal || abft.input_grad == AbftScheme::kNone);
}

void CheckedLinearForward(int batch, int in, int out, const float* x, const float* w,
                          const float* bias, bool relu, float* y, const LinearAbft& abft) {
  LayerChecksums& s = *abft.sums;
  const GemmCall g{false, true, batch, out, in, x, in, w, in, y, out};
  InjectedGemm(g, abft.site, abft.injector).Run(0, batch);
  s.x = x, s.w = w, s.batch = batch, s.in = in, s.out = out;
  s.margin = 0;
  s.w_col_norm2.resize(in);
  s.ref.resize(out);
  s.norm2.resize(out);
  s.got.resize(out);
  if (s.x_summed != x || s.x_summed_batch != batch || s.x_summed_cols != in) {
    s.x_row_sums.resize(batch);
    s.k_sums.resize(in);
    s.x_frobenius2 = SumsOfX(batch, in, x, s.k_sums.data(), s.x_row_sums.data());
  }
  s.x_summed = nullptr;
  SumsOfW(out, in, w, s.k_sums.data(), s.ref.data(), s.norm2.data(), s.w_col_norm2.data());
  LayerChecksums* next = abft.output_sums;
  if (next != nullptr) {
    next->k_sums.resize(out);
    next->x_row_sums.resize(batch);
  }
  const double next_frobenius2 =
      EpilogueWithSums(batch, out, bias, relu, y, s.got.data(),
                       next != nullptr ? next->k_sums.data() : nullptr,
                       next != nullptr ? next->x_row_sums.data() : nullptr);
  if (next != nullptr) {
    next->x_frobenius2 = next_frobenius2;
    next->x_summed = y, next->x_summed_batch = batch, next->x_summed_cols = out;
  }
  Misses(out, s.got.data(), s.ref.data(), batch, in, s.x_frobenius2, s.norm2.data(), &s.margin,
         &s.missed);
  Settle(g, abft.site, abft, s.missed, false, [&](float* rows, int r0, int r1) {
    BiasActivation(r1 - r0, out, bias, relu, rows);
  });
}

bool CheckedLinearBackward(int batch, int in, int out, const float* x, const float* w,
                           const float* dy, float* dw, float* db, float* dx,
                           const float* relu_mask, const LinearAbft& abft) {
  LayerChecksums& s = *abft.sums;
  if (s.x != x || s.w != w || s.batch != batch || s.in != in || s.out != out) return false;
  s.x = nullptr;  // one backward per forward: a later call with these pointers recomputes
  const GemmCall dw_gemm{true, false, out, in, batch, dy, out, x, in, dw, in};
  InjectedGemm(dw_gemm, abft.site + 1, abft.injector).Run(0, out);
  // Per column o of dy: its sum (s.k_sums), squared norm (s.norm2), and dyᵀ (x 1) (s.ref).
  s.k_sums.resize(out);
  s.got.resize(std::max(in, out));
  const bool check_dx = dx != nullptr && abft.input_grad == AbftScheme::kGlobal;
  s.ref_dx.resize(in);
  SumsOfDy(batch, out, dy, s.x_row_sums.data(), db, s.k_sums.data(), s.norm2.data(),
           s.ref.data());
  SumsOfDwAndW(out, in, dw, w, s.k_sums.data(), s.got.data(),
               check_dx ? s.ref_dx.data() : nullptr);
  // dw's row o (dwᵀ's column: p = in rows of x ᵀ, k = batch) against dyᵀ (x 1).
  Misses(out, s.got.data(), s.ref.data(), in, batch, s.x_frobenius2, s.norm2.data(), &s.margin,
         &s.missed);
  Settle(dw_gemm, abft.site + 1, abft, s.missed, true, nullptr);
  if (dx == nullptr) return true;
  const GemmCall dx_gemm{false, false, batch, in, out, dy, out, w, in, dx, in};
  InjectedGemm(dx_gemm, abft.site + 2, check_dx ? abft.injector : nullptr).Run(0, batch);
  if (!check_dx) {
    if (relu_mask != nullptr) ReluBackwardInPlace(static_cast<int64_t>(batch) * in, relu_mask, dx);
    return true;
  }
  double dy_frobenius2 = 0;
  for (int o = 0; o < out; ++o) dy_frobenius2 += s.norm2[o];
  ColumnSums(batch, in, dx, relu_mask, s.got.data());
  Misses(in, s.got.data(), s.ref_dx.data(), batch, out, dy_frobenius2, s.w_col_norm2.data(),
         &s.margin, &s.missed);
  GemmFinish mask;
  if (relu_mask != nullptr) {
    mask = [&](float* rows, int r0, int r1) {
      ReluBackwardInPlace(static_cast<int64_t>(r1 - r0) * in,
                          relu_mask + static_cast<int64_t>(r0) * in, rows);
    };
  }
  Settle(dx_gemm, abft.site + 2, abft, s.missed, false, mask);
  return true;
}

}  // namespace ecps
