// Internal: the (AND, XOR)-semiring GEMM kernels behind the "ecps-*" backends.
//
// Every kernel computes, for each output row q of a coefficient matrix M (rows x cols),
//   dst[q][0..len) (= or ^=) XOR_j M[q][j] * src[j][0..len)
// where M[q][j] * x is a GF(2^8) product, i.e. an 8x8 bit matrix applied to each byte.
// Kernels never allocate, accept any length and alignment, and are thread-compatible
// (they only read the matrix). dst must not overlap any src or another dst.
#ifndef ECPS_CODEC_GF_KERNELS_H_
#define ECPS_CODEC_GF_KERNELS_H_

#include <cstddef>
#include <cstdint>

namespace ecps::codec::internal {

// One coefficient, expanded into the forms each kernel family consumes. All forms are derived
// from the coefficient's 8x8 bit matrix (see gf256.h).
struct PreparedCoef {
  uint8_t lo[16];   // c * x for x = 0..15 (split-nibble vpshufb table, low nibble)
  uint8_t hi[16];   // c * (x << 4) for x = 0..15 (high nibble)
  uint64_t affine;  // the bit matrix in vgf2p8affineqb layout
  uint8_t coef;     // c itself
};

PreparedCoef PrepareCoef(uint8_t c);

// A strided view of prepared coefficients: element (q, j) is base[q * row_stride +
// j * col_stride]. all_ones marks a matrix whose every entry is 1 (XOR-only fast path).
struct MatrixView {
  const PreparedCoef* base;
  int rows;
  int cols;
  ptrdiff_t row_stride;
  ptrdiff_t col_stride;
  bool all_ones;

  const PreparedCoef& at(int q, int j) const { return base[q * row_stride + j * col_stride]; }
};

using ApplyFn = void (*)(const MatrixView& m, const uint8_t* const* src, uint8_t* const* dst,
                         size_t len, bool accumulate);

// dst[q][0..len) ^= coefs[q * stride] * src[0..len) for q < rows (parity update).
using AccumulateFn = void (*)(const PreparedCoef* coefs, ptrdiff_t stride, int rows,
                              const uint8_t* src, uint8_t* const* dst, size_t len);

// Portable 64-bit SWAR kernel; runs anywhere.
void ApplyPortable(const MatrixView& m, const uint8_t* const* src, uint8_t* const* dst, size_t len,
                   bool accumulate);
void AccumulatePortable(const PreparedCoef* coefs, ptrdiff_t stride, int rows, const uint8_t* src,
                        uint8_t* const* dst, size_t len);
#if defined(__x86_64__) || defined(_M_X64)
#define ECPS_CODEC_X86 1
// Each needs the CPU features in its name; call only after checking them.
void ApplyAvx2(const MatrixView& m, const uint8_t* const* src, uint8_t* const* dst, size_t len,
               bool accumulate);
void ApplyAvx2Gfni(const MatrixView& m, const uint8_t* const* src, uint8_t* const* dst, size_t len,
                   bool accumulate);
void ApplyAvx512Gfni(const MatrixView& m, const uint8_t* const* src, uint8_t* const* dst,
                     size_t len, bool accumulate);
void AccumulateAvx2(const PreparedCoef* coefs, ptrdiff_t stride, int rows, const uint8_t* src,
                    uint8_t* const* dst, size_t len);
void AccumulateAvx2Gfni(const PreparedCoef* coefs, ptrdiff_t stride, int rows, const uint8_t* src,
                        uint8_t* const* dst, size_t len);
void AccumulateAvx512Gfni(const PreparedCoef* coefs, ptrdiff_t stride, int rows, const uint8_t* src,
                          uint8_t* const* dst, size_t len);
#endif

}  // namespace ecps::codec::internal

#endif  // ECPS_CODEC_GF_KERNELS_H_
