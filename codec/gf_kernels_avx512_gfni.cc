// AVX-512 GFNI kernel: one vgf2p8affineqb (matrix broadcast from memory) per coefficient and
// 64 bytes. Compiled with -mavx512f -mavx512bw -mavx512vl -mgfni; call only on CPUs with
// all of them.
#include <immintrin.h>

#include "codec/gf_kernels_impl.h"

namespace ecps::codec::internal {
namespace {

struct Avx512Gfni {
  static constexpr size_t kWidth = 64;
  static constexpr int kUnroll = 2;
  static constexpr bool kMasked = true;
  static constexpr int kMaxRows = 6;
  using V = __m512i;
  using P = __m512i;
  static V Load(const uint8_t* p) { return _mm512_loadu_si512(p); }
  static void Store(uint8_t* p, V v) { _mm512_storeu_si512(p, v); }
  static __mmask64 Mask(size_t n) { return (uint64_t{1} << n) - 1; }  // n < 64
  static V LoadN(const uint8_t* p, size_t n) { return _mm512_maskz_loadu_epi8(Mask(n), p); }
  static void StoreN(uint8_t* p, V v, size_t n) { _mm512_mask_storeu_epi8(p, Mask(n), v); }
  static V Zero() { return _mm512_setzero_si512(); }
  static V Xor(V a, V b) { return _mm512_xor_si512(a, b); }
  static P Prep(V x) { return x; }
  static V MulAcc(V acc, const P& x, const PreparedCoef& c) {
    const __m512i matrix = _mm512_set1_epi64(static_cast<long long>(c.affine));
    return _mm512_xor_si512(acc, _mm512_gf2p8affine_epi64_epi8(x, matrix, 0));
  }
};

}  // namespace

void ApplyAvx512Gfni(const MatrixView& m, const uint8_t* const* src, uint8_t* const* dst,
                     size_t len, bool accumulate) {
  ApplyGeneric<Avx512Gfni>(m, src, dst, len, accumulate);
}

void AccumulateAvx512Gfni(const PreparedCoef* coefs, ptrdiff_t stride, int rows, const uint8_t* src,
                          uint8_t* const* dst, size_t len) {
  AccumulateGeneric<Avx512Gfni>(coefs, stride, rows, src, dst, len);
}

}  // namespace ecps::codec::internal
