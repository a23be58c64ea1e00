// AVX2-width (VEX) GFNI kernel: one vgf2p8affineqb per coefficient and 32 bytes. Compiled
// with -mavx2 -mgfni; call only on CPUs with AVX2 and GFNI.
#include <immintrin.h>

#include "codec/gf_kernels_impl.h"

namespace ecps::codec::internal {
namespace {

struct Avx2Gfni {
  static constexpr size_t kWidth = 32;
  static constexpr int kUnroll = 2;
  static constexpr bool kMasked = false;
  static constexpr int kMaxRows = 6;
  using V = __m256i;
  using P = __m256i;
  static V Load(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const V*>(p)); }
  static void Store(uint8_t* p, V v) { _mm256_storeu_si256(reinterpret_cast<V*>(p), v); }
  static V Zero() { return _mm256_setzero_si256(); }
  static V Xor(V a, V b) { return _mm256_xor_si256(a, b); }
  static P Prep(V x) { return x; }
  static V MulAcc(V acc, const P& x, const PreparedCoef& c) {
    const __m256i matrix = _mm256_set1_epi64x(static_cast<long long>(c.affine));
    return _mm256_xor_si256(acc, _mm256_gf2p8affine_epi64_epi8(x, matrix, 0));
  }
};

}  // namespace

void ApplyAvx2Gfni(const MatrixView& m, const uint8_t* const* src, uint8_t* const* dst, size_t len,
                   bool accumulate) {
  ApplyGeneric<Avx2Gfni>(m, src, dst, len, accumulate);
}

void AccumulateAvx2Gfni(const PreparedCoef* coefs, ptrdiff_t stride, int rows, const uint8_t* src,
                        uint8_t* const* dst, size_t len) {
  AccumulateGeneric<Avx2Gfni>(coefs, stride, rows, src, dst, len);
}

}  // namespace ecps::codec::internal
