// Internal: the ISA-generic GEMM driver, included only by the gf_kernels_*.cc files, each of
// which is compiled with its own instruction-set flags. Everything here has internal linkage
// (anonymous namespace), so code built for AVX-512 can never be merged by the linker into
// the portable path.
//
// Blocking: the output is processed in strips of kUnroll vectors; each strip keeps the
// accumulators of up to kMaxRows output rows in registers while it streams one vector per
// source (so every source byte is loaded once per row group). When the matrix has more rows
// than one group, the length is tiled so that a tile of every source stays in L2 while the
// row groups pass over it.
#ifndef ECPS_CODEC_GF_KERNELS_IMPL_H_
#define ECPS_CODEC_GF_KERNELS_IMPL_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "codec/gf_kernels.h"

namespace ecps::codec::internal {
namespace {

// Fixed-count loops over rows and unrolled vectors must be unrolled completely so the
// accumulators live in registers (GCC at -O2 would otherwise keep them on the stack).
#define ECPS_UNROLL _Pragma("GCC unroll 16")

constexpr size_t kL2TileBytes = 256 * 1024;

inline uint8_t ScalarMul(const PreparedCoef& c, uint8_t x) { return c.lo[x & 15] ^ c.hi[x >> 4]; }

// Rows [row0, row0 + rows), bytes [begin, end): one byte at a time. (inline: a kernel TU
// that never falls back to it need not emit it.)
inline void ScalarRows(const MatrixView& m, int row0, int rows, const uint8_t* const* src,
                uint8_t* const* dst, size_t begin, size_t end, bool acc) {
  for (int q = row0; q < row0 + rows; ++q) {
    uint8_t* d = dst[q];
    for (size_t i = begin; i < end; ++i) {
      uint8_t a = acc ? d[i] : 0;
      if (m.all_ones) {
        for (int j = 0; j < m.cols; ++j) a ^= src[j][i];
      } else {
        for (int j = 0; j < m.cols; ++j) a ^= ScalarMul(m.at(q, j), src[j][i]);
      }
      d[i] = a;
    }
  }
}

// T supplies: kWidth, V, P (a source vector prepared for multiplication), Load, Store, Zero,
// Xor, Prep(V) -> P, MulAcc(V acc, const P&, const PreparedCoef&) -> V.
template <class T, int R, int U>
void GemmRows(const MatrixView& m, int row0, const uint8_t* const* src, uint8_t* const* dst,
              size_t begin, size_t end, bool acc) {
  constexpr size_t W = T::kWidth;
  constexpr size_t kStep = W * U;
  const PreparedCoef* base = m.base + row0 * m.row_stride;
  const ptrdiff_t rs = m.row_stride;
  const ptrdiff_t cs = m.col_stride;
  uint8_t* d[R];
  ECPS_UNROLL
  for (int r = 0; r < R; ++r) d[r] = dst[row0 + r];
  for (size_t i = begin; i + kStep <= end; i += kStep) {
    typename T::V a[R][U];
    {
      // The first source initialises the accumulators (or adds to dst).
      const uint8_t* s = src[0] + i;
      typename T::P p[U];
      ECPS_UNROLL
      for (int u = 0; u < U; ++u) p[u] = T::Prep(T::Load(s + u * W));
      ECPS_UNROLL
      for (int r = 0; r < R; ++r) {
        ECPS_UNROLL
        for (int u = 0; u < U; ++u) {
          a[r][u] = T::MulAcc(acc ? T::Load(d[r] + i + u * W) : T::Zero(), p[u], base[r * rs]);
        }
      }
    }
    for (int j = 1; j < m.cols; ++j) {
      const uint8_t* s = src[j] + i;
      const PreparedCoef* c = base + j * cs;
      typename T::P p[U];
      ECPS_UNROLL
      for (int u = 0; u < U; ++u) p[u] = T::Prep(T::Load(s + u * W));
      ECPS_UNROLL
      for (int r = 0; r < R; ++r) {
        ECPS_UNROLL
        for (int u = 0; u < U; ++u) a[r][u] = T::MulAcc(a[r][u], p[u], c[r * rs]);
      }
    }
    ECPS_UNROLL
    for (int r = 0; r < R; ++r) {
      ECPS_UNROLL
      for (int u = 0; u < U; ++u) T::Store(d[r] + i + u * W, a[r][u]);
    }
  }
}

// XOR-only: dst[q] (^)= XOR_j src[j] for every row q (all coefficients are 1).
template <class T, int U>
void XorRows(const MatrixView& m, int row0, int rows, const uint8_t* const* src,
             uint8_t* const* dst, size_t begin, size_t end, bool acc) {
  constexpr size_t W = T::kWidth;
  constexpr size_t kStep = W * U;
  for (size_t i = begin; i + kStep <= end; i += kStep) {
    typename T::V a[U];
    ECPS_UNROLL
    for (int u = 0; u < U; ++u) a[u] = T::Load(src[0] + i + u * W);
    for (int j = 1; j < m.cols; ++j) {
      ECPS_UNROLL
      for (int u = 0; u < U; ++u) a[u] = T::Xor(a[u], T::Load(src[j] + i + u * W));
    }
    for (int q = row0; q < row0 + rows; ++q) {
      ECPS_UNROLL
      for (int u = 0; u < U; ++u) {
        T::Store(dst[q] + i + u * W, acc ? T::Xor(a[u], T::Load(dst[q] + i + u * W)) : a[u]);
      }
    }
  }
}

// One partial vector (n < kWidth bytes) at `at`, with masked loads and stores.
template <class T, int R>
void MaskedRows(const MatrixView& m, int row0, const uint8_t* const* src, uint8_t* const* dst,
                size_t at, size_t n, bool acc) {
  typename T::V a[R];
  ECPS_UNROLL
  for (int r = 0; r < R; ++r) a[r] = acc ? T::LoadN(dst[row0 + r] + at, n) : T::Zero();
  for (int j = 0; j < m.cols; ++j) {
    const typename T::V x = T::LoadN(src[j] + at, n);
    if (m.all_ones) {
      ECPS_UNROLL
      for (int r = 0; r < R; ++r) a[r] = T::Xor(a[r], x);
    } else {
      const typename T::P p = T::Prep(x);
      ECPS_UNROLL
      for (int r = 0; r < R; ++r) a[r] = T::MulAcc(a[r], p, m.at(row0 + r, j));
    }
  }
  ECPS_UNROLL
  for (int r = 0; r < R; ++r) T::StoreN(dst[row0 + r] + at, a[r], n);
}

template <class T, int R>
void GroupOfRows(const MatrixView& m, int row0, const uint8_t* const* src, uint8_t* const* dst,
                 size_t begin, size_t end, bool acc) {
  constexpr size_t W = T::kWidth;
  constexpr size_t kBig = W * T::kUnroll;
  const size_t n = end - begin;
  const size_t big_end = begin + n / kBig * kBig;
  const size_t vec_end = begin + n / W * W;
  if (m.all_ones) {
    XorRows<T, T::kUnroll>(m, row0, R, src, dst, begin, big_end, acc);
    XorRows<T, 1>(m, row0, R, src, dst, big_end, vec_end, acc);
  } else {
    GemmRows<T, R, T::kUnroll>(m, row0, src, dst, begin, big_end, acc);
    GemmRows<T, R, 1>(m, row0, src, dst, big_end, vec_end, acc);
  }
  if (vec_end == end) return;
  if constexpr (T::kMasked) {
    MaskedRows<T, R>(m, row0, src, dst, vec_end, end - vec_end, acc);
  } else {
    ScalarRows(m, row0, R, src, dst, vec_end, end, acc);
  }
}

template <class T, int R = T::kMaxRows>
void DispatchRows(int rows, const MatrixView& m, int row0, const uint8_t* const* src,
                  uint8_t* const* dst, size_t begin, size_t end, bool acc) {
  if constexpr (R >= 1) {
    if (rows == R) return GroupOfRows<T, R>(m, row0, src, dst, begin, end, acc);
    return DispatchRows<T, R - 1>(rows, m, row0, src, dst, begin, end, acc);
  }
}

template <class T>
void ApplyGeneric(const MatrixView& m, const uint8_t* const* src, uint8_t* const* dst, size_t len,
                  bool acc) {
  if (len == 0 || m.rows == 0 || m.cols == 0) return;
  constexpr size_t kBig = T::kWidth * T::kUnroll;
  size_t tile = len;
  if (m.rows > T::kMaxRows) {
    tile = std::max(kBig, kL2TileBytes / static_cast<size_t>(m.cols) / kBig * kBig);
  }
  for (size_t begin = 0; begin < len; begin += tile) {
    const size_t end = std::min(len, begin + tile);
    for (int row0 = 0; row0 < m.rows; row0 += T::kMaxRows) {
      const int rows = std::min(T::kMaxRows, m.rows - row0);
      DispatchRows<T>(rows, m, row0, src, dst, begin, end, acc);
    }
  }
}

// dst[q] ^= coefs[q * stride] * src for q < rows: the update path (64 B - 2 KiB blocks).
// Row by row, so each inner loop is branch-free and specialised (XOR or multiply); delta is
// small enough to stay in L1 between rows.
template <class T, bool kXor>
void AccumulateRow(const PreparedCoef& c, const uint8_t* src, uint8_t* d, size_t len) {
  constexpr size_t W = T::kWidth;
  size_t i = 0;
  for (; i + 2 * W <= len; i += 2 * W) {
    const typename T::V x0 = T::Load(src + i), x1 = T::Load(src + i + W);
    if constexpr (kXor) {
      T::Store(d + i, T::Xor(T::Load(d + i), x0));
      T::Store(d + i + W, T::Xor(T::Load(d + i + W), x1));
    } else {
      T::Store(d + i, T::MulAcc(T::Load(d + i), T::Prep(x0), c));
      T::Store(d + i + W, T::MulAcc(T::Load(d + i + W), T::Prep(x1), c));
    }
  }
  if (i + W <= len) {
    const typename T::V x = T::Load(src + i);
    T::Store(d + i, kXor ? T::Xor(T::Load(d + i), x) : T::MulAcc(T::Load(d + i), T::Prep(x), c));
    i += W;
  }
  if (i == len) return;
  if constexpr (T::kMasked) {
    const size_t n = len - i;
    const typename T::V x = T::LoadN(src + i, n);
    T::StoreN(d + i,
              kXor ? T::Xor(T::LoadN(d + i, n), x) : T::MulAcc(T::LoadN(d + i, n), T::Prep(x), c),
              n);
  } else {
    for (; i < len; ++i) d[i] ^= kXor ? src[i] : ScalarMul(c, src[i]);
  }
}

// Two multiply rows in one pass over src (r >= 2 codes update two parity blocks at once).
template <class T>
void AccumulatePair(const PreparedCoef& c0, const PreparedCoef& c1, const uint8_t* src, uint8_t* d0,
                    uint8_t* d1, size_t len) {
  constexpr size_t W = T::kWidth;
  size_t i = 0;
  for (; i + W <= len; i += W) {
    const typename T::P p = T::Prep(T::Load(src + i));
    T::Store(d0 + i, T::MulAcc(T::Load(d0 + i), p, c0));
    T::Store(d1 + i, T::MulAcc(T::Load(d1 + i), p, c1));
  }
  if (i == len) return;
  if constexpr (T::kMasked) {
    const size_t n = len - i;
    const typename T::P p = T::Prep(T::LoadN(src + i, n));
    T::StoreN(d0 + i, T::MulAcc(T::LoadN(d0 + i, n), p, c0), n);
    T::StoreN(d1 + i, T::MulAcc(T::LoadN(d1 + i, n), p, c1), n);
  } else {
    for (; i < len; ++i) {
      d0[i] ^= ScalarMul(c0, src[i]);
      d1[i] ^= ScalarMul(c1, src[i]);
    }
  }
}

template <class T>
void AccumulateGeneric(const PreparedCoef* coefs, ptrdiff_t stride, int rows, const uint8_t* src,
                       uint8_t* const* dst, size_t len) {
  int q = 0;
  while (q < rows) {
    const PreparedCoef& c = coefs[q * stride];
    if (c.coef == 1) {
      AccumulateRow<T, true>(c, src, dst[q], len);
      ++q;
    } else if (q + 1 < rows && coefs[(q + 1) * stride].coef != 1) {
      AccumulatePair<T>(c, coefs[(q + 1) * stride], src, dst[q], dst[q + 1], len);
      q += 2;
    } else {
      AccumulateRow<T, false>(c, src, dst[q], len);
      ++q;
    }
  }
}

}  // namespace
}  // namespace ecps::codec::internal

#endif  // ECPS_CODEC_GF_KERNELS_IMPL_H_
