// AVX2 kernel without GFNI: split-nibble vpshufb tables (derived from each coefficient's bit
// matrix). Compiled with -mavx2; call only on CPUs with AVX2.
#include <immintrin.h>

#include "codec/gf_kernels_impl.h"

namespace ecps::codec::internal {
namespace {

struct Avx2Shuffle {
  static constexpr size_t kWidth = 32;
  static constexpr int kUnroll = 2;
  static constexpr bool kMasked = false;
  static constexpr int kMaxRows = 4;
  using V = __m256i;
  struct P {
    __m256i lo, hi;
  };
  static V Load(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const V*>(p)); }
  static void Store(uint8_t* p, V v) { _mm256_storeu_si256(reinterpret_cast<V*>(p), v); }
  static V Zero() { return _mm256_setzero_si256(); }
  static V Xor(V a, V b) { return _mm256_xor_si256(a, b); }
  static P Prep(V x) {
    const __m256i mask = _mm256_set1_epi8(0x0f);
    return {_mm256_and_si256(x, mask), _mm256_and_si256(_mm256_srli_epi64(x, 4), mask)};
  }
  static V MulAcc(V acc, const P& p, const PreparedCoef& c) {
    const __m256i lo =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c.lo)));
    const __m256i hi =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c.hi)));
    return _mm256_xor_si256(
        acc, _mm256_xor_si256(_mm256_shuffle_epi8(lo, p.lo), _mm256_shuffle_epi8(hi, p.hi)));
  }
};

}  // namespace

void ApplyAvx2(const MatrixView& m, const uint8_t* const* src, uint8_t* const* dst, size_t len,
               bool accumulate) {
  ApplyGeneric<Avx2Shuffle>(m, src, dst, len, accumulate);
}

void AccumulateAvx2(const PreparedCoef* coefs, ptrdiff_t stride, int rows, const uint8_t* src,
                    uint8_t* const* dst, size_t len) {
  AccumulateGeneric<Avx2Shuffle>(coefs, stride, rows, src, dst, len);
}

}  // namespace ecps::codec::internal
