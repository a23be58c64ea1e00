// Portable kernel: 64-bit SWAR. A source word's eight doublings x, 2x, ..., 128x are computed
// once and shared by all rows; c * x is then the XOR of the doublings selected by c's bits
// (the columns of c's bit matrix).
#include <cstring>

#include "codec/gf256.h"
#include "codec/gf_kernels_impl.h"

namespace ecps::codec::internal {
namespace {

struct Swar64 {
  static constexpr size_t kWidth = 8;
  static constexpr int kUnroll = 1;
  static constexpr bool kMasked = false;
  static constexpr int kMaxRows = 4;
  using V = uint64_t;
  struct P {
    uint64_t pow[8];
  };
  static V Load(const uint8_t* p) {
    V v;
    std::memcpy(&v, p, 8);
    return v;
  }
  static void Store(uint8_t* p, V v) { std::memcpy(p, &v, 8); }
  static V Zero() { return 0; }
  static V Xor(V a, V b) { return a ^ b; }
  static P Prep(V x) {
    P p;
    p.pow[0] = x;
    ECPS_UNROLL
    for (int b = 1; b < 8; ++b) {
      const uint64_t v = p.pow[b - 1];
      const uint64_t high = (v >> 7) & 0x0101010101010101ull;
      p.pow[b] = ((v & 0x7f7f7f7f7f7f7f7full) << 1) ^ (high * 0x1d);
    }
    return p;
  }
  static V MulAcc(V acc, const P& p, const PreparedCoef& c) {
    // Loop over c's set bits: the per-coefficient trip pattern repeats every strip, so the
    // branch predictor learns it.
    for (unsigned k = c.coef; k != 0; k &= k - 1) acc ^= p.pow[__builtin_ctz(k)];
    return acc;
  }
};

}  // namespace

PreparedCoef PrepareCoef(uint8_t c) {
  PreparedCoef p{};
  p.coef = c;
  p.affine = gf::AffineMatrix(c);
  for (int x = 0; x < 16; ++x) {
    p.lo[x] = gf::AffineApply(p.affine, static_cast<uint8_t>(x));
    p.hi[x] = gf::AffineApply(p.affine, static_cast<uint8_t>(x << 4));
  }
  return p;
}

void ApplyPortable(const MatrixView& m, const uint8_t* const* src, uint8_t* const* dst, size_t len,
                   bool accumulate) {
  ApplyGeneric<Swar64>(m, src, dst, len, accumulate);
}

void AccumulatePortable(const PreparedCoef* coefs, ptrdiff_t stride, int rows, const uint8_t* src,
                        uint8_t* const* dst, size_t len) {
  AccumulateGeneric<Swar64>(coefs, stride, rows, src, dst, len);
}

}  // namespace ecps::codec::internal
