// GF(2^8) (polynomial 0x11D, ISA-L's field) arithmetic usable from host and device code.
// Header-only, C++17, no dependencies, so the CUDA kernels and their host references share
// one definition.
#ifndef ECPS_CODEC_CUDA_GF_MATH_H_
#define ECPS_CODEC_CUDA_GF_MATH_H_

#include <cstdint>

#ifdef __CUDACC__
#define ECPS_GF_HD __host__ __device__ __forceinline__
#else
#define ECPS_GF_HD inline
#endif

namespace ecps::codec::cuda {

// a * b, shift-and-add.
ECPS_GF_HD uint8_t GfMulByte(uint8_t a, uint8_t b) {
  unsigned p = 0, x = a;
  for (int i = 0; i < 8; ++i) {
    if ((b >> i) & 1) p ^= x;
    x <<= 1;
    if (x & 0x100) x ^= 0x11D;
  }
  return static_cast<uint8_t>(p);
}

// c * x for each of the four bytes of x (SWAR doubling chain).
ECPS_GF_HD uint32_t GfMulWord(uint8_t c, uint32_t x) {
  uint32_t p = 0;
  for (unsigned k = c; k != 0; k >>= 1) {
    if (k & 1) p ^= x;
    x = ((x & 0x7f7f7f7fu) << 1) ^ (((x >> 7) & 0x01010101u) * 0x1du);
  }
  return p;
}

}  // namespace ecps::codec::cuda

#endif  // ECPS_CODEC_CUDA_GF_MATH_H_
